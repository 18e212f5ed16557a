"""Studies: jobs that answer a question from traces alone, without serving requests."""
