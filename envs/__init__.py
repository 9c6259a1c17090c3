"""Episodes and scoring: gymnasium.Env classes, their spaces, feedback and scorers."""
