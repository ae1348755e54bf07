"""A reward a random tiny model earns unevenly (a hash of the text), so group advantages are non-zero."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return (sum(ord(c) for c in solution_str) % 7) / 6.0
