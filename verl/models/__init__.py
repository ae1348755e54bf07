"""Model builders and patches (HF loading, value heads)."""
