"""CS349E PagedAttention autograder: sandbox, hidden suites, rubric and reports (staff only)."""
