"""The fixed calibration text of the tiny-model fixtures (ASCII, 400 lines,
~5 KB, 8+ chunks of 64 tokens for tiny-llama3.gguf): written to argv[1].

Used by scripts/make_imatrix_fixtures (llama-imatrix) and scripts/hessians
(--self-check, the committed Hessian fixture), so both see the same tokens.
"""

import random
import sys

words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly "
         "judge boxing matches and every river runs toward the distant sea").split()
rng = random.Random(20261201)
lines = [" ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(400)]
with open(sys.argv[1], "w") as f:
    f.write("\n".join(lines) + "\n")
