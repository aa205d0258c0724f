"""The measures of uncertainty quality (paper §4.2): span and sequence AUROC, pair accuracy, MAE,
Spearman, ECE, cluster-bootstrap intervals and the positive-label rule. Pure math on scores and
labels, used by the label report's truth check, training's dev selection and the evaluate stage."""
