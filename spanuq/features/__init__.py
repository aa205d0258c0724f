"""Hidden-state features: extraction, sharded storage, and the training dataset."""
