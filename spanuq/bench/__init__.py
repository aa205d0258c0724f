"""Benchmarks on human labels: `spanuq bench mushroom` (the English Mu-SHROOM split, SemEval-2025 Task 3)."""
