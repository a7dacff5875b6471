"""Third-party MXNet models (GluonCV, GluonNLP) built offline with seeded random weights."""
