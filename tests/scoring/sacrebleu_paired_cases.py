"""Generates several systems' files and what sacreBLEU's command line prints for them with its
statistical tests (tests/scoring/sacrebleu_test.cpp).

usage: sacrebleu_paired_cases.py SEED CASES OUT_DIR

For case i, OUT_DIR/i/ gets sys0.txt [sys1.txt ...] (sys0 is the baseline), ref0.txt [ref1.txt],
args.txt (fairseq-cpp-score's arguments, one per line, file paths relative to the case folder) and
expected.txt: the standard output of the real `sacrebleu` command (`python -m sacrebleu REF... -i
SYS... -f text`, SACREBLEU_SEED set) with --paired-bs, --paired-ar, --confidence or none of them.
OUT_DIR/numpy.txt holds draws of numpy's default_rng for the generator's own check. The same SEED
gives the same cases; the commands run two at a time.
"""
import concurrent.futures
import os
import random
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sacrebleu_cases import line_pair, perturb, sentence  # noqa: E402


def numpy_draws(out_dir):
    """Lines 'SEED KIND N COUNT v1 v2 ...' of rng.choice(N, size=COUNT) and rng.integers(2, size=COUNT, dtype=bool)."""
    lines = []
    for seed in (12345, 0, 1, 2**32 + 7, 2**63 + 5):
        for n in (1, 2, 3, 1000, 3000, 2**31 + 11):
            values = np.random.default_rng(seed).choice(n, size=2000, replace=True)
            lines.append(f"{seed} choice {n} {len(values)} " + " ".join(map(str, values)))
        values = np.random.default_rng(seed).integers(2, size=2000, dtype=bool)
        lines.append(f"{seed} bool 2 {len(values)} " + " ".join(str(int(v)) for v in values))
    with open(os.path.join(out_dir, "numpy.txt"), "w") as f:
        f.write("".join(line + "\n" for line in lines))


def make_case(rng, folder):
    mode = rng.choice(["bs", "bs", "bs", "ar", "ar", "confidence", "confidence", "table"])
    # Not 3 lines with --confidence: sacreBLEU 2.5.1 with numpy 2 then stops with "don't know how
    # to coerce float and float32" when a resample scores a plain 0.0 beside float32 scores.
    n_lines = rng.choice([3 if mode != "confidence" else 10, rng.randint(10, 60), rng.randint(60, 150)])
    n_refs = rng.choice([1, 1, 2])
    n_systems = 1 if mode == "confidence" else rng.randint(2, 5)
    refs = [[] for _ in range(n_refs)]
    systems = [[] for _ in range(n_systems)]
    # Systems of several qualities; some nearly the baseline, so that some p-values are large.
    quality = [rng.random() for _ in range(n_systems)]
    for _ in range(n_lines):
        hyp, ref = line_pair(rng)
        refs[0].append(ref)
        for k in range(1, n_refs):
            refs[k].append(perturb(rng, ref))
        for s in range(n_systems):
            if s == 0:
                systems[s].append(hyp)
            elif rng.random() < quality[s]:
                systems[s].append(systems[0][-1])
            else:
                systems[s].append(perturb(rng, ref) if rng.random() < 0.8 else sentence(rng, rng.randint(1, 12)))
    sys_files = [f"sys{s}.txt" for s in range(n_systems)]
    ref_files = [f"ref{k}.txt" for k in range(n_refs)]
    for name, lines in zip(sys_files + ref_files, systems + refs):
        with open(os.path.join(folder, name), "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))
    metrics = [m for m in ("bleu", "chrf", "ter") if rng.random() < 0.6] or ["bleu"]
    width = rng.choice([1, 1, 2, 3])
    seed = rng.choice([12345, 12345, 1, 2026, 2**40 + 3])
    ours = ["--sys"] + sys_files + ["--ref"] + ref_files + ["--metric", ",".join(metrics), "--width", str(width),
                                                            "--resample-seed", str(seed)]
    theirs = ref_files + ["-i"] + sys_files + ["-m"] + metrics + ["-w", str(width), "-f", "text"]
    if mode == "bs":
        n = rng.choice([1000, 500, 200])
        ours += ["--paired-bs", "--paired-bs-n", str(n)]
        theirs += ["--paired-bs", "--paired-bs-n", str(n)]
    elif mode == "ar":
        n = rng.choice([1000, 2000, 500])
        ours += ["--paired-ar", "--paired-ar-n", str(n)]
        theirs += ["--paired-ar", "--paired-ar-n", str(n)]
    elif mode == "confidence":
        n = rng.choice([1000, 300])
        ours += ["--confidence", "--confidence-n", str(n)]
        theirs += ["--confidence", "--confidence-n", str(n)]
    tokenize = rng.choice(["13a", "13a", "intl", "char"])
    ours += ["--tokenize", tokenize]
    theirs += ["--tokenize", tokenize]
    if "chrf" in metrics and rng.random() < 0.3:
        ours += ["--chrf-word-order", "2"]
        theirs += ["--chrf-word-order", "2"]
    if "ter" in metrics and rng.random() < 0.3:
        ours += ["--ter-normalized"]
        theirs += ["--ter-normalized"]
    with open(os.path.join(folder, "args.txt"), "w", encoding="utf-8") as f:
        f.write("".join(a + "\n" for a in ours))
    env = dict(os.environ, SACREBLEU_SEED=str(seed), NO_COLOR="1")
    return [sys.executable, "-m", "sacrebleu"] + theirs, env


def main():
    seed, cases, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.makedirs(out_dir)
    numpy_draws(out_dir)
    rng = random.Random(seed)
    commands = []
    for case in range(cases):
        folder = os.path.join(out_dir, str(case))
        os.makedirs(folder)
        commands.append((folder,) + make_case(rng, folder))

    def run(job):
        folder, argv, env = job
        r = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, encoding="utf-8")
        if r.returncode != 0:
            raise SystemExit(f"sacrebleu failed in {folder}: {' '.join(argv)}\n{r.stderr}")
        with open(os.path.join(folder, "expected.txt"), "w", encoding="utf-8") as f:
            f.write(r.stdout)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(run, commands))
    import sacrebleu
    print(f"sacrebleu {sacrebleu.__version__}, numpy {np.__version__}: {cases} cases, seed {seed}")


if __name__ == "__main__":
    main()
