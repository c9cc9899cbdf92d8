#!/usr/bin/env bash
# tools/make-demo-corpus (CTest `tools.make_demo_corpus`): determinism from the seed, split sizes
# and disjointness, and hand-written translations of each phenomenon through --translate.
# Usage: make_demo_corpus_test.sh SOURCE_DIR
set -uo pipefail
tool=${1:?usage: make_demo_corpus_test.sh SOURCE_DIR}/tools/make-demo-corpus
dir=$(mktemp -d /tmp/fsq-demo-corpus-XXXXXX)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/check.sh"

sizes=(--train-size 3000 --valid-size 200 --test-size 300)
"$tool" --seed 7 --outdir "$dir/a" "${sizes[@]}" || { echo "FAIL: generator exited $?" >&2; exit 1; }
"$tool" --seed 7 --outdir "$dir/b" "${sizes[@]}" || { echo "FAIL: generator exited $?" >&2; exit 1; }
"$tool" --seed 8 --outdir "$dir/c" "${sizes[@]}" || { echo "FAIL: generator exited $?" >&2; exit 1; }
files="test.de test.en train.de train.en valid.de valid.en"

check "exactly the six split files, no temporary left" [ "$(ls "$dir/a" | tr '\n' ' ')" = "$files " ]
check "same seed gives byte-identical files" diff -r "$dir/a" "$dir/b"
for f in $files; do
  check "another seed gives another $f" bash -c '! cmp -s "$1" "$2"' _ "$dir/a/$f" "$dir/c/$f"
done

count() { wc -l <"$1" | tr -d ' '; }
for split in train:3000 valid:200 test:300; do
  name=${split%:*}
  check "$name.en has ${split#*:} lines" [ "$(count "$dir/a/$name.en")" = "${split#*:}" ]
  check "$name.de has ${split#*:} lines" [ "$(count "$dir/a/$name.de")" = "${split#*:}" ]
  check "$name has no empty line" bash -c '! grep -q "^$" "$1" "$2"' _ "$dir/a/$name.en" "$dir/a/$name.de"
done

overlap() { sort -u "$1" >"$dir/s1"; sort -u "$2" >"$dir/s2"; comm -12 "$dir/s1" "$dir/s2" | wc -l | tr -d ' '; }
check "no test source sentence in train" [ "$(overlap "$dir/a/test.en" "$dir/a/train.en")" = 0 ]
check "no valid source sentence in train" [ "$(overlap "$dir/a/valid.en" "$dir/a/train.en")" = 0 ]
check "no test source sentence in valid" [ "$(overlap "$dir/a/test.en" "$dir/a/valid.en")" = 0 ]
check "train sentences are distinct" [ "$(sort "$dir/a/train.en" | uniq -d | wc -l)" = 0 ]

lengths=$(awk '{print NF}' "$dir/a/train.en" | sort -n | uniq | tr '\n' ' ')
check "lengths run from 3 to 30 words (found: $lengths)" \
  bash -c '[ "$(awk "{print NF}" "$1" | sort -n | head -1)" = 3 ] && [ "$(awk "{print NF}" "$1" | sort -n | tail -1)" = 30 ]' _ "$dir/a/train.en"
check "the corpus has weil/wenn/dass clauses, number words and compounds" \
  bash -c 'grep -q ", weil " "$1" && grep -q ", dass " "$1" && grep -q "^Wenn " "$1" &&
           grep -qE "[a-z]und(zwanzig|dreißig|vierzig|fünfzig|sechzig|siebzig|achtzig|neunzig) " "$1" &&
           grep -q "Küchentisch" "$1"' _ "$dir/a/train.de"

# The corpus and --translate agree: the first test pairs, re-translated from their English.
for n in 1 2 3 4 5 6 7 8; do
  en=$(sed -n "${n}p" "$dir/a/test.en")
  de=$(sed -n "${n}p" "$dir/a/test.de")
  check "test pair $n re-translates: $en" [ "$("$tool" --translate "$en")" = "$de" ]
done

expect() {  # expect ENGLISH GERMAN: --translate prints exactly GERMAN
  local got
  got=$("$tool" --translate "$1")
  [ "$got" = "$2" ] || { echo "  $1 -> got '$got', expected '$2'" >&2; return 1; }
}
check "verb final after weil" expect "The dog sleeps because the cat sings." \
  "Der Hund schläft, weil die Katze singt."
check "verb second after a fronted adverb, past as perfect, separable participle" \
  expect "Yesterday my brother called the teacher." "Gestern hat mein Bruder den Lehrer angerufen."
check "separable verb split in the main clause, joined in the subordinate clause" \
  expect "The girl opens the window because the man calls the doctor." \
  "Das Mädchen macht das Fenster auf, weil der Mann den Arzt anruft."
check "fronted subordinate clause inverts the main clause; compound; im" \
  expect "When the boy opens the kitchen door, the cat runs in the garden." \
  "Wenn der Junge die Küchentür aufmacht, läuft die Katze im Garten."
check "number word with unit-ten inversion, dative recipient, strong adjective" \
  expect "She gave the child twenty-three red apples." "Sie hat dem Kind dreiundzwanzig rote Äpfel gegeben."
check "gender and case agreement of article and adjective (mixed declension)" \
  expect "A happy woman finds a new blue table." "Eine glückliche Frau findet einen neuen blauen Tisch."
check "neuter nominative after ein" expect "A small horse sleeps." "Ein kleines Pferd schläft."
check "weak declension after dieser, dative feminine" \
  expect "This old man thanks the young woman." "Dieser alte Mann dankt der jungen Frau."
check "dative verb and dative plural noun" expect "The men help two tired children." \
  "Die Männer helfen zwei müden Kindern."
check "modal sends the infinitive to the end; time adverb after the verb" \
  expect "My sister wants to visit the teachers today." "Meine Schwester will heute die Lehrer besuchen."
check "perfect with sein; weak noun in the dative" expect "The dog followed the boy." \
  "Der Hund ist dem Jungen gefolgt."
check "dass clause, verb final, auxiliary last" expect "I think that the girls came back yesterday." \
  "Ich denke, dass die Mädchen gestern zurückgekommen sind."
check "compound plural with Fugen-s in the dative" expect "He sleeps with my birthday letters." \
  "Er schläft mit meinen Geburtstagsbriefen."

rejects() {  # rejects ENGLISH: --translate exits 2 with a one-line message quoting the sentence
  local err rc
  err=$("$tool" --translate "$1" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" = 2 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -qF "$1" <<<"$err" ||
    { echo "  $1 -> exit $rc, '$err'" >&2; return 1; }
}
check "subject-verb disagreement is rejected" rejects "The dogs sleeps."
check "a wrong article form is rejected" rejects "A old man sleeps."
check "a word outside the vocabulary is rejected" rejects "The dog sleeps in the zoo."
check "a verb with a subject it does not take is rejected" rejects "The book eats the apple."
check "yesterday with the present tense is rejected" rejects "Yesterday the dog sleeps."

check_summary ""
