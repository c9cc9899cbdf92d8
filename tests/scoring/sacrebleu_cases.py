"""Generates system/reference files and sacreBLEU's own output for them (tests/scoring/sacrebleu_test.cpp).

usage: sacrebleu_cases.py SEED CASES OUT_DIR

For case i, OUT_DIR/i/ gets sys.txt, ref0.txt [ref1.txt ...], args.txt (fairseq-cpp-eval score's
arguments, one per line, file paths relative to the case folder) and expected.txt: the lines that
sacreBLEU's command line prints with `-f text -w <width>` for each metric, computed here with the
package's API exactly as its command line does (lines read with rstrip(), score.format(width, False,
signature)). The same SEED gives the same cases.
"""
import os
import random
import sys
import unicodedata

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF, TER

WORDS = {
    "latin": ["Grüße", "naïve", "café", "Straße", "über", "déjà", "vu", "Ærø", "smörgåsbord", "the", "cat", "sat",
              "on", "mat", "a", "house", "is", "big", "ÉCOLE", "Œuvre", "İstanbul", "ıi", "ß", "Ñandú"],
    "cyrillic": ["Привет", "мир", "Москва", "ещё", "ЁЛКА", "съешь", "этих", "мягких", "булок"],
    "greek": ["ΟΔΟΣ", "Σοφία", "λόγος", "ΑΣ'", "ΣΣ", "ψυχή"],
    "cjk": ["我爱你", "中文", "北京欢迎你", "東京", "日本語", "한국어", "中华人民共和国"],
    "arabic": ["مرحبا", "بالعالم", "العربية", "١٢٣", "كتاب"],
    "thai": ["สวัสดี", "ภาษาไทย", "ครับ", "๑๒๓"],
}
PUNCT = [".", ",", "!", "?", "...", "!!!", "?!", ";", ":", "—", "–", "-", "(", ")", "\"", "'", "«", "»", "„", "“",
         "”", "¿", "¡", "…", "&amp;", "&lt;", "&gt;", "&quot;", "<skipped>", "$", "€", "%", "@", "#", "/", "\\",
         "[", "]", "{", "}", "~", "^", "`", "|", "。", "，", "、", "！", "？", "《", "》", "・"]
NUMBERS = ["1,000.50", "3.14", "10-20", "2024", "1.000.000", "42.", ".5", "7,5", "12:30", "3/4", "-5", "+7",
           "١٬٠٠٠", "1 000"]


def word(rng):
    r = rng.random()
    if r < 0.6:
        script = rng.choice(list(WORDS))
        w = rng.choice(WORDS[script])
    elif r < 0.8:
        w = rng.choice(PUNCT)
    else:
        w = rng.choice(NUMBERS)
    if rng.random() < 0.15:  # glued punctuation, as in real text
        w = w + rng.choice(PUNCT)
    if rng.random() < 0.05:
        w = rng.choice(PUNCT) + w
    return w


def sentence(rng, length):
    out = []
    for _ in range(length):
        out.append(word(rng))
        r = rng.random()
        out.append(" " if r < 0.85 else "" if r < 0.92 else rng.choice(["  ", "\t", "\u00a0", "\u3000"]))
    return "".join(out)


def perturb(rng, ref):
    """A hypothesis near `ref`: words dropped, repeated, swapped, recased, renormalised."""
    words = ref.split(" ")
    out = []
    for w in words:
        r = rng.random()
        if r < 0.1:
            continue
        if r < 0.15:
            out.append(w)
        if r < 0.2:
            w = w.upper() if rng.random() < 0.5 else w.lower()
        elif r < 0.27:
            w = unicodedata.normalize("NFD", w)  # differs only in normalisation
        out.append(w)
    if len(out) > 2 and rng.random() < 0.3:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


def line_pair(rng):
    r = rng.random()
    if r < 0.04:
        return "", sentence(rng, rng.randint(1, 5))  # empty hypothesis
    if r < 0.06:
        return sentence(rng, rng.randint(1, 5)), ""  # empty reference
    if r < 0.08:
        return "", ""
    # Some very long lines: longer than TER's beam (25 words) and its largest shift distance (50).
    length = rng.randint(60, 150) if r < 0.1 else rng.randint(1, 25)
    ref = sentence(rng, length)
    hyp = perturb(rng, ref) if rng.random() < 0.85 else sentence(rng, rng.randint(1, 25))
    if rng.random() < 0.1:
        hyp += rng.choice([" ", "  ", "\u00a0", "\t", " \u3000"])  # trailing whitespace
    return hyp, ref


def main():
    seed, cases, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = random.Random(seed)
    for case in range(cases):
        folder = os.path.join(out_dir, str(case))
        os.makedirs(folder)
        n_lines = rng.randint(1, 40)
        n_refs = rng.choice([1, 1, 1, 2, 3])
        hyps, refs = [], [[] for _ in range(n_refs)]
        for _ in range(n_lines):
            hyp, ref = line_pair(rng)
            hyps.append(hyp)
            refs[0].append(ref)
            for k in range(1, n_refs):
                refs[k].append(perturb(rng, ref) if rng.random() < 0.8 else sentence(rng, rng.randint(1, 10)))
        files = ["sys.txt"] + [f"ref{k}.txt" for k in range(n_refs)]
        for name, lines in zip(files, [hyps] + refs):
            with open(os.path.join(folder, name), "w", encoding="utf-8", newline="\n") as f:
                f.write("".join(line + "\n" for line in lines))
        tokenize = rng.choice(["13a", "13a", "intl", "zh", "char", "none"])
        lowercase = rng.random() < 0.3
        smooth = rng.choice(["exp", "exp", "floor", "add-k", "none"])
        smooth_value = rng.choice([None, None, 0.05, 2.0]) if smooth in ("floor", "add-k") else None
        word_order = rng.choice([0, 0, 1, 2])
        char_order = rng.choice([6, 6, 4])
        beta = rng.choice([2, 2, 1, 3])
        chrf_lowercase = rng.random() < 0.3
        whitespace = rng.random() < 0.2
        eps = rng.random() < 0.2
        width = rng.choice([2, 2, 1, 3])
        ter = {"case_sensitive": rng.random() < 0.3, "normalized": rng.random() < 0.4,
               "no_punct": rng.random() < 0.3, "asian_support": rng.random() < 0.3}
        args = ["--sys", "sys.txt", "--ref"] + files[1:] + [
            "--metric", "bleu,chrf,ter", "--tokenize", tokenize, "--smooth-method", smooth,
            "--chrf-word-order", str(word_order), "--chrf-char-order", str(char_order), "--chrf-beta", str(beta),
            "--width", str(width)]
        if smooth_value is not None:
            args += ["--smooth-value", str(smooth_value)]
        for flag, on in (("--lowercase", lowercase), ("--chrf-lowercase", chrf_lowercase),
                         ("--chrf-whitespace", whitespace), ("--chrf-eps-smoothing", eps),
                         ("--ter-case-sensitive", ter["case_sensitive"]), ("--ter-normalized", ter["normalized"]),
                         ("--ter-no-punct", ter["no_punct"]), ("--ter-asian-support", ter["asian_support"])):
            if on:
                args.append(flag)
        with open(os.path.join(folder, "args.txt"), "w", encoding="utf-8") as f:
            f.write("".join(a + "\n" for a in args))
        # As sacreBLEU's command line reads the files and prints each metric.
        def read(name):
            with open(os.path.join(folder, name), encoding="utf-8", newline="\n") as f:
                return [line.rstrip() for line in f]
        sys_lines, ref_lines = read("sys.txt"), [read(name) for name in files[1:]]
        metrics = [BLEU(tokenize=tokenize, lowercase=lowercase, smooth_method=smooth, smooth_value=smooth_value),
                   CHRF(char_order=char_order, word_order=word_order, beta=beta, lowercase=chrf_lowercase,
                        whitespace=whitespace, eps_smoothing=eps),
                   TER(**ter)]
        expected = []
        for metric in metrics:
            score = metric.corpus_score(sys_lines, ref_lines)
            expected.append(score.format(width, False, metric.get_signature().format(False)))
        with open(os.path.join(folder, "expected.txt"), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in expected))
    print(f"sacrebleu {sacrebleu.__version__}: {cases} cases, seed {seed}")


if __name__ == "__main__":
    main()
