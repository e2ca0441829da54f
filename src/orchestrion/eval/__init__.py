"""Evaluation: datasets, scorers, a resumable runner and reports."""
