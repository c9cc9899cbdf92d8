"""Tokenized lines and sacremoses' detokenization of them (tests/scoring/sacremoses_test.cpp).

usage: sacremoses_cases.py MULTI30K_DIR SEED OUT_FILE

OUT_FILE gets one line per case, "origin<TAB>lang<TAB>tokens<TAB>expected", where expected is
MosesDetokenizer(lang).detokenize(tokens.split()), what fairseq's --eval-bleu-detok moses does. The
cases: every line of Multi30k's test and val sets in English and German, tokenized as fairseq's
moses tokenizer does (aggressive dash splits, escaped); a fixed list of hostile lines in each
language; and SEED's random lines of quotes, apostrophes, entities, currency, brackets, CJK and
Finnish case suffixes. A case where sacremoses itself raises (its Czech "-li" rule) is left out
and counted. Prints the package's version and the counts.
"""
import gzip
import os
import random
import sys
from importlib.metadata import version

from sacremoses import MosesDetokenizer, MosesTokenizer

LANGS = ["en", "de", "fr", "it", "ga", "cs", "fi", "ko", "zh", "es", "pt"]

HOSTILE = [
    "",
    "   ",
    "a  b\u3000c \u00a0 d\u2003",
    "' ' ' ' ' '",
    "\" \" \" a \" \" b",
    "`` a '' b `` c '' '' ''",
    "„ „ a “ “ b „ c",
    "“ x “ y „ z „",
    "„“ a „“ b",
    "&quot; &quot; &apos; &apos; &quot;&quot; &apos;&apos;",
    "don 't , can &apos;t , I 'M , it 's the boys ' toys and Jones ' s",
    "l' homme , L&apos; arbre , dell' anno , d' fhág , l' 5 , é' a",
    "x' - li a x' – Mail y x' - lı",
    "3 , 5 a 1 ,",
    "1 . 5 a 3 , 5 x 2 .",
    "EU: n EU: ssa EU : sta Yhdysvallat: ssako",
    "a @-@ @-@ b @-@ @-@ @-@ c @-@",
    "@-@",
    "&amp;amp; &amp;quot; &amp;lt; &lt; &gt; &#124; &bar; &#91; &#93; &bra; &ket; & ;",
    "$ 5 , € 4 , ₾ 3 , ( [ { ¿ ¡ a } ] ) $$ ([ ¢ 1",
    "? ! : ; \\ % . , ) ] } ?! ... %%",
    "猫 猫 , 日本 a 語 한국 한국 x猫 猫x",
    "ʼ a ʼ ǅ 'ǅ 'ʰ 'Ω ά' ß'",
]

POOL = [
    "'", "''", "'''", '"', "``", "`", "„", "“", "”", "„“", "&quot;", "&apos;", "&apos;s", "&apos;t", "'s", "'S",
    "'é", "'\u0560", "'ǅ", "l'", "L&apos;", "dell'", "d'", "x'", "a'", "é'", "-", "–", "li", "LI", "lı", "Lİ", "mail",
    "Mailbox", "@-@", "&amp;", "&amp;lt;", "&lt;", "&gt;", "&#124;", "&bar;", "&#91;", "&#93;", "&bra;", "&ket;",
    "$", "€", "£", "¥", "₹", "\u20be", "(\u20be", "₠", "﹩", "$$", "([", "(", "[", "{", "¿", "¡", ")", "]", "}", ",",
    ".", "?", "!", ":", ";", "\\", "%", "...", "?!", "),", "5", "3", "12", "a", "s", "Jones", "ABC", "EU:", "n",
    "ssa", "Ssa", "kin", "hanko", "nsako", "猫", "日本", "한국", "x猫", "猫x", "ά", "ß", "Ω", "ǅ", "ʰ", "\u0345",
    "\u0560", "¢", "ʼ", "&", "&quot;&quot;",
]


def main():
    multi30k, seed, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    cases = []  # (origin, lang, tokens)
    for name in ["test_2016_flickr", "val"]:
        for lang in ["en", "de"]:
            tokenizer = MosesTokenizer(lang)
            with gzip.open(os.path.join(multi30k, f"{name}.{lang}.gz"), "rt", encoding="utf-8", newline="\n") as f:
                for i, line in enumerate(f, 1):
                    tokens = tokenizer.tokenize(line.rstrip("\n"), aggressive_dash_splits=True, return_str=True,
                                                escape=True)
                    cases.append((f"{name}.{lang}:{i}", lang, tokens))
    multi30k_count = len(cases)
    for i, line in enumerate(HOSTILE):
        cases += [(f"hostile:{i}", lang, line) for lang in LANGS]
    rng = random.Random(seed)
    for i in range(20000):
        tokens = " ".join(rng.choice(POOL) for _ in range(rng.randint(1, 12)))
        cases.append((f"random:{i}", rng.choice(LANGS), tokens))

    raised = 0
    with open(out_path, "w", encoding="utf-8", newline="\n") as out:
        for origin, lang, tokens in cases:
            try:
                expected = MosesDetokenizer(lang).detokenize(tokens.split())
            except TypeError:
                raised += 1
                continue
            fields = [origin, lang, tokens, expected]
            if any("\t" in f or "\n" in f for f in fields):
                sys.exit(f"{origin}: a tab or a line break in {fields!r}")
            out.write("\t".join(fields) + "\n")
    print(f"sacremoses {version('sacremoses')}")
    print(f"multi30k {multi30k_count} other {len(cases) - multi30k_count} raised {raised}")


if __name__ == "__main__":
    main()
