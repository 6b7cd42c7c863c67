//! Unit tests of the classifier's parts: number reading, durations, normalisation, the table.
