"""The SpanUQ probe: span geometry, Mixture-of-Beta head, Hungarian matcher, losses, checkpoints."""
from .checkpoint import load_checkpoint, save_checkpoint
from .losses import SetCriterion, ranking_pairs
from .matcher import HungarianMatcher
from .mob import MixtureOfBeta, beta_log_prob, mob_log_prob, mob_mean, mob_precision
from .probe import SpanUQProbe, sinusoidal_position_encoding
from .span_ops import (
    generalized_span_iou,
    normalized_to_token_spans,
    pairwise_span_iou,
    span_cw_to_se,
    span_giou,
    span_iou,
    span_length,
    span_se_to_cw,
    suppress_duplicates,
    token_spans_to_normalized,
)

__all__ = [
    "HungarianMatcher", "MixtureOfBeta", "SetCriterion", "SpanUQProbe",
    "beta_log_prob", "generalized_span_iou", "load_checkpoint", "mob_log_prob", "mob_mean", "mob_precision",
    "normalized_to_token_spans", "pairwise_span_iou", "ranking_pairs", "save_checkpoint",
    "sinusoidal_position_encoding", "span_cw_to_se", "span_giou", "span_iou", "span_length", "span_se_to_cw",
    "suppress_duplicates",
    "token_spans_to_normalized",
]
