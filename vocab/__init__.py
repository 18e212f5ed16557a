"""The suite's shared vocabulary, the bottom layer every other package may import: the record types
(:mod:`vocab.records`), the errors a user causes (:mod:`vocab.errors`), the names of the files a job writes
(:mod:`vocab.result_files`) and atomic file writes (:mod:`vocab.atomic_files`). It imports nothing of the
suite."""
