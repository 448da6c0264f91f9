"""How many paired repetitions put a comparison's interval within the equivalence margin,
for a per-repetition log-ratio spread measured on this VM: the two one-sided tests' interval
against the test's own interval at 1 - alpha (docs/statistics.md, "The margin").

    python3 bench/margin_reps.py [--sd 0.12] [--alpha 0.007]
"""

import argparse
import math

from scipy import stats


def reps(quantile: float, room: float, sd: float) -> int | None:
    """The smallest n whose Student's t interval half-width fits in room."""
    for n in range(3, 5000):
        if stats.t.ppf(quantile, n - 1) * sd / math.sqrt(n) <= room:
            return n
    return None


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--sd", type=float, default=0.12, help="sd of the per-repetition log ratios")
    parser.add_argument("--alpha", type=float, default=0.007, help="a comparison's alpha at a later look")
    args = parser.parse_args()
    print("| margin | true ratio | two one-sided tests | interval at 1 - alpha |")
    print("|---|---|---|---|")
    for margin in (0.05, 0.10):
        for ratio in (1.0, 1.03):
            room = math.log1p(margin) - math.log(ratio)
            tost = reps(1 - args.alpha, room, args.sd)
            two_sided = reps(1 - args.alpha / 2, room, args.sd)
            print(f"| ±{margin:.0%} | {ratio:.2f} | {tost} | {two_sided} |")


if __name__ == "__main__":
    main()
