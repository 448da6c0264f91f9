"""Reading stored runs: where a stack's time went (decompose), why (explain), what noisy runs
had in common (covariates), whether the host drifted, two experiments side by side
(compare) and a plan's ratios over time (trend)."""
