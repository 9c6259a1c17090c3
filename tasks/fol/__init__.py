"""First-order-logic queries over a KG: the BetaE patterns as JSON trees with their executor, their
instantiation on a KG, and their plain-English wording."""
