"""`layerbench bisect`: which variant of a layer (a git revision of a FUSE daemon, a set of
options) made a stack slower. The plan's `[bisect]` table names the variants (spec.py); each
revision is checked out and built under the scratch root (variants.py); the search (search.py)
puts each variant it looks at against the current good end, one experiment per comparison
(oracle.py: interleaved, paired, under the sequential design with the margin as its
threshold); the log of comparisons is stored as it grows, so that a killed bisect resumes
without measuring a finished comparison again (run.py)."""
