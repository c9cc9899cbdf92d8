// fairseq-cpp-eval score, fairseq-cpp-generate and fairseq-cpp-interactive as programs, against
// the fairseq v0.9 fixture (../shared/fixtures/fairseq-v0.9/README.md) and Python's `re` running
// sacreBLEU's 13a rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "fairseq_cpp/nn/quantized_linear.h"
#include "fairseq_cpp/scoring/tokenizers.h"
#include "tests/support/imported_checkpoint.h"
#include "tests/support/test_support.h"

namespace fairseq_cpp {
namespace {
namespace fs = std::filesystem;

int count_lines(const std::string& text, const std::string& prefix) {
  int n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

// The multi30k German test references, gunzipped once.
class ScoreProgram : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ref_ = dir_->path() + "/test_2016_flickr.de";
    auto r = testing::run(
        {"/bin/sh", "-c",
         "gzip -dc '" + testing::shared_dir() + "/data/multi30k/test_2016_flickr.de.gz' > '" + ref_ + "'"});
    gunzip_status_ = r.exit_code;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(gunzip_status_, 0) << "cannot gunzip the multi30k test references"; }
  static testing::TempDir* dir_;
  static std::string ref_;
  static int gunzip_status_;
};
testing::TempDir* ScoreProgram::dir_ = nullptr;
std::string ScoreProgram::ref_;
int ScoreProgram::gunzip_status_ = -1;

TEST_F(ScoreProgram, ReproducesSacrebleusFiguresOnTheFixture) {
  auto r = testing::run(
      {testing::program("fairseq-cpp-eval"), "score", "--sys", testing::fixture_path("test.hyp.de"), "--ref", ref_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The fixture README: sacreBLEU 2.5.1's output for these files.
  EXPECT_EQ(r.out,
            "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1 = 30.24 61.1/36.4/23.9/15.7 (BP = 1.000 "
            "ratio = 1.016 hyp_len = 12302 ref_len = 12106)\n"
            "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.5.1 = 54.43\n");
  auto chrf = testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys",
                            testing::fixture_path("test.hyp.de"), "--ref", ref_, "--metric", "chrf"});
  ASSERT_EQ(chrf.exit_code, 0) << chrf.err;
  EXPECT_EQ(count_lines(chrf.out, "chrF2|"), 1);
  EXPECT_EQ(count_lines(chrf.out, "BLEU|"), 0);
  // fairseq-cpp-score is the same program without LibTorch; several metrics and references.
  std::vector<std::string> args{"--sys", testing::fixture_path("test.hyp.de"), "--ref", ref_, ref_, "--metric",
                                "bleu,chrf++,ter", "--tokenize", "intl"};
  std::vector<std::string> eval_argv{testing::program("fairseq-cpp-eval"), "score"}, score_argv{
                                                                                     testing::program("fairseq-cpp-score")};
  eval_argv.insert(eval_argv.end(), args.begin(), args.end());
  score_argv.insert(score_argv.end(), args.begin(), args.end());
  auto via_eval = testing::run(eval_argv), via_score = testing::run(score_argv);
  ASSERT_EQ(via_score.exit_code, 0) << via_score.err;
  EXPECT_EQ(via_score.out, via_eval.out);
  for (const char* line : {"BLEU|nrefs:2|", "chrF2++|nrefs:2|", "TER|nrefs:2|"})
    EXPECT_EQ(count_lines(via_score.out, line), 1) << via_score.out;
  // The hypotheses from standard input.
  auto piped = testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys", "/dev/stdin", "--ref", ref_}, {},
                            testing::read_file(testing::fixture_path("test.hyp.de")));
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, r.out);
}

TEST_F(ScoreProgram, BadInputIsAOneLineUserError) {
  testing::TempDir tmp;
  const std::string two = tmp.write("two.txt", "a\nb\n");
  const std::string three = tmp.write("three.txt", "a\nb\nc\n");
  auto r = testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys", two, "--ref", three});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has 2 lines but"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err, ""), 1) << r.err;
  // The second of two references is the short one: both counts named.
  r = testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys", three, "--ref", three, two});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(three + " has 3 lines but " + two + " has 2"), std::string::npos) << r.err;
  auto metric =
      testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys", two, "--ref", two, "--metric", "bleu,tre"});
  EXPECT_EQ(metric.exit_code, 2);
  EXPECT_NE(metric.err.find("unknown metric `tre` (did you mean `ter`?)"), std::string::npos) << metric.err;
  EXPECT_EQ(count_lines(metric.err, ""), 1) << metric.err;
  auto tok =
      testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys", two, "--ref", two, "--tokenize", "13b"});
  EXPECT_EQ(tok.exit_code, 2);
  EXPECT_NE(tok.err.find("13b"), std::string::npos) << tok.err;
  EXPECT_NE(tok.err.find("13a"), std::string::npos) << tok.err;
  auto missing = testing::run(
      {testing::program("fairseq-cpp-eval"), "score", "--sys", two, "--ref", tmp.path() + "/nothing.txt"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find(tmp.path() + "/nothing.txt"), std::string::npos) << missing.err;
  auto flag =
      testing::run({testing::program("fairseq-cpp-eval"), "score", "--sys", two, "--ref", two, "--bleu-order", "3"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.err.find("bleu-order"), std::string::npos) << flag.err;
}

TEST_F(ScoreProgram, SeveralSystemsAndTheirTestsRefuseWhatCannotWork) {
  testing::TempDir tmp;
  const std::string a = tmp.write("a.txt", "a b c\nd e\n"), b = tmp.write("b.txt", "a b\nd e f\n");
  const std::string three = tmp.write("three.txt", "a\nb\nc\n");
  auto score = [](std::vector<std::string> args) {
    args.insert(args.begin(), testing::program("fairseq-cpp-score"));
    return testing::run(args);
  };
  // A second system with another line count: both files and both counts.
  auto r = score({"--sys", a, three, "--ref", a, "--paired-bs"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(three + " has 3 lines but " + a + " has 2"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err, ""), 1) << r.err;
  // A paired test needs a system beside the baseline; one test at a time; --confidence is for one system.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--sys", a, "--ref", b, "--paired-bs"},
           {"--sys", a, b, "--ref", b, "--paired-bs", "--paired-ar"},
           {"--sys", a, b, "--ref", b, "--confidence"},
           {"--sys", a, b, a, "--ref", b}}) {
    r = score(args);
    EXPECT_EQ(r.exit_code, 2) << args.back() << ": " << r.out;
    EXPECT_EQ(count_lines(r.err, ""), 1) << r.err;
    EXPECT_EQ(r.out, "");
  }
  // The baseline named again among the systems is skipped in a paired test, as sacreBLEU does.
  r = score({"--sys", a, b, a, "--ref", b, "--paired-ar", "--paired-ar-n", "20"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto occurrences = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = r.out.find(what); at != std::string::npos; at = r.out.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(occurrences("(p = "), 2U) << r.out;  // b's, under BLEU and chrF
  EXPECT_EQ(occurrences("Baseline: " + a + " │"), 1U) << r.out;
  EXPECT_EQ(occurrences(a + " │"), 1U) << r.out;  // a's one row
}

// Our 13a tokenizer against sacreBLEU's own regular expressions run by Python's `re`.
TEST(Tokenize13aReference, EqualsPythonRe) {
  const std::vector<std::string> lines = {
      "Hello, world! (test) [x] {y} a/b \"q\" 'z' #1 $2 %3 @4 ~5 ^6 _7 `8 |9 \\0",
      "Numbers 3.14, 1,000.5 and 2-3 vs. a-b; x.y,z .5 ,6 7. 8,",
      "..., ,,, .a ,b a. b, 1.a a.1 &amp;&lt;&gt;&quot; <skipped> tail-\nnext",
      "Grüße.Über, naïve—dash… «quotes» 10.5€ ¿qué?  tabs\tand  spaces",
  };
  testing::TempDir tmp;
  std::string input;
  for (const auto& l : lines) input += l + '\x1e';
  const std::string script = tmp.write("tok13a.py", R"(import re, sys
rules = [(re.compile(r'([\{-\~\[-\` -\&\(-\+\:-\@\/])'), r' \1 '),
         (re.compile(r'([^0-9])([\.,])'), r'\1 \2 '),
         (re.compile(r'([\.,])([^0-9])'), r' \1 \2'),
         (re.compile(r'([0-9])(-)'), r'\1 \2 ')]
def tok(line):
    line = line.replace('<skipped>', '').replace('-\n', '').replace('\n', ' ')
    if '&' in line:
        line = line.replace('&quot;', '"').replace('&amp;', '&').replace('&lt;', '<').replace('&gt;', '>')
    line = ' ' + line + ' '
    for r, s in rules:
        line = r.sub(s, line)
    return ' '.join(line.split())
data = sys.stdin.buffer.read().decode('utf-8')
for l in data.split('\x1e')[:-1]:
    sys.stdout.write(tok(l) + '\x1e')
)");
  auto r = testing::run({testing::python_executable(), script}, {}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> expected;
  std::stringstream out(r.out);
  for (std::string l; std::getline(out, l, '\x1e');) expected.push_back(l);
  ASSERT_EQ(expected.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(scoring::tokenize_13a(lines[i]), expected[i]) << lines[i];
}

// The fixture checkpoint imported once for the suite.
class ImportedFixture : public testing::ImportedFairseqCheckpoint {
 protected:
  // fairseq-cpp-interactive with the fixture's data-bin, imported checkpoint and SentencePiece
  // model, then `extra`.
  std::vector<std::string> interactive_with(const std::vector<std::string>& extra) const {
    std::vector<std::string> argv{testing::program("fairseq-cpp-interactive"), testing::fixture_path("data-bin"),
                                  "--path", imported_, "--sentencepiece-model", testing::fixture_path("spm8k.model")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  // fairseq-cpp-generate's output for 10 test sentences (every 100th batch of 5), beam 5, then
  // `flags`; expects exit 0.
  std::string generate_sample(const std::vector<std::string>& flags) const {
    std::vector<std::string> argv{testing::program("fairseq-cpp-generate"), testing::fixture_path("data-bin")};
    argv.insert(argv.end(), {"--path", imported_, "--batch-size", "5", "--num-shards", "100", "--beam", "5"});
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = testing::run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  }
};

TEST_F(ImportedFixture, InteractiveTranslatesRawTextLikeFairseq) {
  // Line 2 is test sentence 944 (fairseq: "Zwei Jungen spielen Fußball."), line 1 is empty, line 3
  // is longer than the model's 1024 source positions.
  std::string long_line;
  for (int i = 0; i < 1100; ++i) long_line += "dog ";
  const std::string input = "\nTwo boys play soccer against each other.\n" + long_line + "\nA dog runs.\n";
  auto r =
      testing::run({testing::program("fairseq-cpp-interactive"), testing::fixture_path("data-bin"), "--path", imported_,
                    "--sentencepiece-model", testing::fixture_path("spm8k.model"), "--buffer-size", "2", "--beam", "5"},
                   {}, input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("S-1\tTwo boys play soccer against each other.\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("D-1\t"), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("H-1\t(-[0-9.]+)\tZwei Jungen spielen Fußball\\.\n"))) << r.out;
  EXPECT_NEAR(std::stod(m[1]), -0.3458670675754547, 1e-3);
  EXPECT_EQ(count_lines(r.out, "H-0\t"), 1) << r.out;  // the empty line is translated, not fatal
  EXPECT_EQ(count_lines(r.out, "W-2\t"), 1) << r.out;  // the long one is skipped with a note
  EXPECT_EQ(count_lines(r.out, "H-2\t"), 0) << r.out;
  EXPECT_EQ(count_lines(r.out, "H-3\t"), 1) << r.out;
  EXPECT_EQ(count_lines(r.out, "P-"), 3) << r.out;

  // --input FILE instead of standard input.
  testing::TempDir tmp;
  const std::string file = tmp.write("in.txt", "Two boys play soccer against each other.\n");
  auto f = testing::run({testing::program("fairseq-cpp-interactive"), testing::fixture_path("data-bin"), "--path",
                         imported_, "--sentencepiece-model", testing::fixture_path("spm8k.model"), "--input", file});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.out.find("\tZwei Jungen spielen Fußball.\n"), std::string::npos) << f.out;
  EXPECT_EQ(count_lines(f.out, "H-0\t"), 1) << f.out;
}

TEST_F(ImportedFixture, InteractiveWithoutSentencePieceModelIsAUserError) {
  auto r = testing::run(
      {testing::program("fairseq-cpp-interactive"), testing::fixture_path("data-bin"), "--path", imported_}, {},
      "A dog.\n");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("no SentencePiece model for raw input"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--sentencepiece-model"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err, "fairseq-cpp-interactive: error: "), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, ""), 1 + count_lines(r.err, "20")) << "one error line besides log lines:\n" << r.err;
}

TEST_F(ImportedFixture, GenerateRejectsADataBinWithOtherDictionaries) {
  testing::TempDir tmp;
  const std::string bin = tmp.path() + "/data-bin";
  fs::create_directories(bin);
  for (const char* name : {"test.en-de.en.bin", "test.en-de.en.idx", "test.en-de.de.bin", "test.en-de.de.idx"}) {
    fs::create_symlink(testing::fixture_path(std::string("data-bin/") + name), bin + "/" + name);
  }
  tmp.write("data-bin/dict.en.txt", "a 1\nb 1\nc 1\nd 1\n");
  tmp.write("data-bin/dict.de.txt", "a 1\nb 1\nc 1\nd 1\n");
  auto r = testing::run({testing::program("fairseq-cpp-generate"), bin, "--path", imported_, "--gen-subset", "test"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("dictionary of 8000 entries, but the data's has 8"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err, "fairseq-cpp-generate: error: "), 1) << r.err;
  EXPECT_EQ(count_lines(r.err, ""), 1 + count_lines(r.err, "20")) << "one error line besides log lines:\n" << r.err;
  auto flag = testing::run({testing::program("fairseq-cpp-generate"), testing::fixture_path("data-bin"), "--path",
                            imported_, "--beam-size-typo", "5"});
  EXPECT_EQ(flag.exit_code, 2);
}

// fairseq-cpp-generate on 10 test sentences: diverse beam search prints --nbest hypotheses per
// sentence; --match-source-len gives each output its source's length.
TEST_F(ImportedFixture, GenerateWithDiverseBeamSearchAndMatchSourceLen) {
  auto generate = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> argv{testing::program("fairseq-cpp-generate"), testing::fixture_path("data-bin")};
    argv.insert(argv.end(), {"--path", imported_, "--batch-size", "5", "--num-shards", "100"});  // every 100th batch
    argv.insert(argv.end(), flags.begin(), flags.end());
    return testing::run(argv);
  };
  auto r = generate({"--beam", "4", "--nbest", "4", "--diverse-beam-groups", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int sentences = count_lines(r.out, "S-");
  EXPECT_EQ(sentences, 10) << r.out;
  EXPECT_EQ(count_lines(r.out, "H-"), 4 * sentences) << r.out;
  EXPECT_EQ(count_lines(r.out, "P-"), 4 * sentences) << r.out;
  std::map<std::string, int> per_id;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("H-", 0) == 0) ++per_id[line.substr(0, line.find('\t'))];
  EXPECT_EQ(per_id.size(), static_cast<size_t>(sentences));
  for (const auto& [id, n] : per_id) EXPECT_EQ(n, 4) << id;

  // Source "w1 ... wn" (n + 1 tokens with </s>): n + 1 words and </s>, so n + 2 positional scores.
  r = generate({"--beam", "5", "--match-source-len"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, size_t> source_words, scores;
  auto fields = [](const std::string& text) {
    std::istringstream in(text);
    size_t n = 0;
    for (std::string w; in >> w;) ++n;
    return n;
  };
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) {
    const size_t tab = line.find('\t');
    if (line.rfind("S-", 0) == 0) source_words[line.substr(2, tab - 2)] = fields(line.substr(tab + 1));
    if (line.rfind("P-", 0) == 0) scores[line.substr(2, tab - 2)] = fields(line.substr(tab + 1));
  }
  EXPECT_EQ(source_words.size(), 10u) << r.out;
  for (const auto& [id, n] : source_words) EXPECT_EQ(scores[id], n + 2) << "sentence " << id;

  // Groups that do not divide the beam, and diverse beam search with sampling: one line, exit 2.
  for (const auto& flags : std::vector<std::vector<std::string>>{
           {"--beam", "4", "--diverse-beam-groups", "3"},
           {"--beam", "2", "--diverse-beam-groups", "4"},
           {"--beam", "2", "--nbest", "2", "--sampling", "--diverse-beam-groups", "2"}}) {
    r = generate(flags);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(count_lines(r.err, "fairseq-cpp-generate: error: "), 1) << r.err;
    EXPECT_NE(r.err.find("`generation.diverse_beam_groups` must"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}


// One generate run's lines per sentence id: the words of S-, H- and A- (first hypothesis).
struct Sentence {
  std::vector<std::string> source, hypothesis, alignment;
  std::string alignment_line;
};

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Also checks that each A- line comes right after its hypothesis' P- line.
std::map<std::string, Sentence> sentences(const std::string& out) {
  std::map<std::string, Sentence> by_id;
  std::istringstream in(out);
  std::string previous;
  for (std::string line; std::getline(in, line); previous = line) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos || tab < 3 || line[1] != '-') continue;
    const std::string id = line.substr(2, tab - 2);
    std::string text = line.substr(tab + 1);
    Sentence& s = by_id[id];
    if (line[0] == 'S') s.source = words(text);
    if (line[0] == 'H') s.hypothesis = words(text.substr(text.find('\t') + 1));
    if (line[0] == 'A') {
      EXPECT_EQ(previous.rfind("P-" + id + "\t", 0), 0u) << "A-" << id << " not after its P- line";
      s.alignment = words(text);
      s.alignment_line = text;
    }
  }
  return by_id;
}

std::string line_of(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::pair<int64_t, int64_t> pair_of(const std::string& text) {
  const size_t dash = text.find('-');
  return {std::stoll(text.substr(0, dash)), std::stoll(text.substr(dash + 1))};
}

// The PyTorch recomputation of one sentence's alignment from fairseq's checkpoint (its source and
// our hypothesis on stdin): the decoder teacher-forced on the hypothesis, the last layer's encoder
// attention averaged over heads; prints the hard pairs, then the soft weights.
constexpr const char* kAttentionScript = R"(import math, sys
import torch
tools, checkpoint, dictionary = sys.argv[1:4]
sys.path.insert(0, tools)
import restricted_load
sd = restricted_load.load(checkpoint)['model']
with open(dictionary, encoding='utf-8') as f:
    index = {line.split(' ')[0]: i + 4 for i, line in enumerate(f.read().split('\n')) if line}
lines = sys.stdin.buffer.read().decode('utf-8').split('\n')
src = torch.tensor([index[w] for w in lines[0].split()] + [2])
hyp = torch.tensor([index[w] for w in lines[1].split()] + [2])
dim, heads, layers = 256, 4, 3
def embed(tokens, prefix):  # fairseq's sinusoidal positions start at padding_idx + 1 = 2
    half = dim // 2
    e = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    e = torch.arange(2, 2 + tokens.numel(), dtype=torch.float).unsqueeze(1) * e.unsqueeze(0)
    return math.sqrt(dim) * sd[prefix + 'embed_tokens.weight'][tokens] + torch.cat([torch.sin(e), torch.cos(e)], 1)
def linear(x, p):
    return x @ sd[p + '.weight'].t() + sd[p + '.bias']
def norm(x, p):
    return torch.nn.functional.layer_norm(x, (dim,), sd[p + '.weight'], sd[p + '.bias'], 1e-5)
def attention(x, kv, p, causal=False):
    d = dim // heads
    q = (linear(x, p + '.q_proj') * d ** -0.5).view(-1, heads, d).transpose(0, 1)
    k = linear(kv, p + '.k_proj').view(-1, heads, d).transpose(0, 1)
    v = linear(kv, p + '.v_proj').view(-1, heads, d).transpose(0, 1)
    s = q @ k.transpose(1, 2)
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float('-inf'))
    w = torch.softmax(s, -1)
    return linear((w @ v).transpose(0, 1).reshape(-1, dim), p + '.out_proj'), w.mean(0)
def ffn(x, p):
    return linear(torch.relu(linear(x, p + 'fc1')), p + 'fc2')
with torch.no_grad():
    x = embed(src, 'encoder.')
    for i in range(layers):
        p = 'encoder.layers.%d.' % i
        x = norm(x + attention(x, x, p + 'self_attn')[0], p + 'self_attn_layer_norm')
        x = norm(x + ffn(x, p), p + 'final_layer_norm')
    y = embed(torch.cat([torch.tensor([2]), hyp[:-1]]), 'decoder.')
    for i in range(layers):
        p = 'decoder.layers.%d.' % i
        y = norm(y + attention(y, y, p + 'self_attn', causal=True)[0], p + 'self_attn_layer_norm')
        a, attn = attention(y, x, p + 'encoder_attn')
        y = norm(y + a, p + 'encoder_attn_layer_norm')
        y = norm(y + ffn(y, p), p + 'final_layer_norm')
print(' '.join('%d-%d' % (int(row[:-1].argmax()), t) for t, row in enumerate(attn[:-1])))
print(' '.join(','.join('%.6f' % w for w in row) for row in attn.tolist()))
)";

// --print-alignment on 10 test sentences: one hard pair per target token but </s>, the search
// unchanged by collecting the attention.
TEST_F(ImportedFixture, GeneratePrintsHardAlignments) {
  const std::string plain = generate_sample({});
  const std::string hard = generate_sample({"--print-alignment"});
  auto by_id = sentences(hard);
  EXPECT_EQ(count_lines(hard, "A-"), 10) << hard;
  // The search is the same with the attention collected.
  EXPECT_EQ(count_lines(hard, "A-"), count_lines(hard, "H-"));
  for (const auto& [id, s] : sentences(plain)) EXPECT_EQ(by_id[id].hypothesis, s.hypothesis) << id;
  // One pair per target token but </s>, the target side counting up, the source within the
  // source's tokens (</s> excluded).
  for (const auto& [id, s] : by_id) {
    ASSERT_EQ(s.alignment.size(), s.hypothesis.size()) << id << ": " << s.alignment_line;
    for (size_t t = 0; t < s.alignment.size(); ++t) {
      auto [src, tgt] = pair_of(s.alignment[t]);
      EXPECT_EQ(tgt, static_cast<int64_t>(t)) << id;
      EXPECT_GE(src, 0) << id;
      EXPECT_LT(src, static_cast<int64_t>(s.source.size())) << id;
    }
  }
}

// --print-alignment soft: the weights of one sentence without <unk> equal PyTorch's recomputation.
TEST_F(ImportedFixture, SoftAlignmentsAreTheLastLayersEncoderAttention) {
  auto by_id = sentences(generate_sample({"--print-alignment"}));
  const std::string soft = generate_sample({"--print-alignment", "soft"});
  auto soft_by_id = sentences(soft);
  std::string id;
  for (const auto& [i, s] : by_id) {
    const std::string text = line_of(s.source) + " " + line_of(s.hypothesis);
    if (text.find("<unk>") == std::string::npos && s.hypothesis.size() >= 3) {
      id = i;
      break;
    }
  }
  ASSERT_FALSE(id.empty());
  testing::TempDir tmp;
  const std::string script = tmp.write("attention.py", kAttentionScript);
  auto py = testing::run({testing::python_executable(), script, testing::source_dir() + "/tools",
                          testing::fixture_path("checkpoint_best.pt"), testing::fixture_path("data-bin/dict.en.txt")},
                         {}, line_of(by_id[id].source) + "\n" + line_of(by_id[id].hypothesis) + "\n");
  ASSERT_EQ(py.exit_code, 0) << py.err;
  std::istringstream py_out(py.out);
  std::string py_hard, py_soft;
  std::getline(py_out, py_hard);
  std::getline(py_out, py_soft);
  EXPECT_EQ(by_id[id].alignment_line, py_hard) << "sentence " << id;
  // The soft weights: one row per target token (</s> too), one weight per source token.
  const auto ours = soft_by_id[id].alignment, theirs = words(py_soft);
  ASSERT_EQ(ours.size(), theirs.size()) << soft_by_id[id].alignment_line << "\n" << py_soft;
  for (size_t t = 0; t < ours.size(); ++t) {
    std::vector<double> a, b;
    std::stringstream sa(ours[t]), sb(theirs[t]);
    for (std::string v; std::getline(sa, v, ',');) a.push_back(std::stod(v));
    for (std::string v; std::getline(sb, v, ',');) b.push_back(std::stod(v));
    ASSERT_EQ(a.size(), by_id[id].source.size() + 1);
    ASSERT_EQ(a.size(), b.size());
    for (size_t s = 0; s < a.size(); ++s) EXPECT_NEAR(a[s], b[s], 5e-6) << "target " << t << ", source " << s;
  }
}

// --replace-unk: an unknown-word penalty of -10 makes the model write <unk>; each becomes the
// source token its A- pair names (or "<eos>", fairseq's word past the source), or that word's
// translation in an alignment dictionary.
TEST_F(ImportedFixture, GenerateReplacesUnknownWords) {
  testing::TempDir tmp;
  const std::string unks = generate_sample({"--print-alignment", "--unkpen", "-10"});
  const std::string copied = generate_sample({"--print-alignment", "--unkpen", "-10", "--replace-unk"});
  auto with_unk = sentences(unks), replaced = sentences(copied);
  std::string dict_lines;
  int unk_words = 0;
  for (const auto& [i, s] : with_unk) {
    const Sentence& r = replaced[i];
    ASSERT_EQ(r.hypothesis.size(), s.hypothesis.size()) << i;
    EXPECT_EQ(r.alignment_line, s.alignment_line) << i;
    for (size_t t = 0; t < s.hypothesis.size(); ++t) {
      if (s.hypothesis[t] != "<unk>") {
        EXPECT_EQ(r.hypothesis[t], s.hypothesis[t]) << i;
        continue;
      }
      ++unk_words;
      const auto src = static_cast<size_t>(pair_of(s.alignment[t]).first);
      const std::string word = src < s.source.size() ? s.source[src] : "<eos>";
      EXPECT_EQ(r.hypothesis[t], word) << i << ": " << line_of(r.hypothesis);
      dict_lines += word + " TRANSLATED\n";
    }
  }
  EXPECT_GT(unk_words, 0) << unks;
  const std::string translated =
      generate_sample({"--print-alignment", "--unkpen", "-10", "--replace-unk", tmp.write("align.txt", dict_lines)});
  EXPECT_EQ(count_lines(translated, "H-"), 10);
  int translated_words = 0;
  for (const auto& [i, s] : sentences(translated)) {
    for (size_t t = 0; t < s.hypothesis.size(); ++t) translated_words += s.hypothesis[t] == "TRANSLATED";
    EXPECT_EQ(std::count(s.hypothesis.begin(), s.hypothesis.end(), "<unk>"), 0) << i;
  }
  EXPECT_EQ(translated_words, unk_words);
  // D- lines carry the same text.
  EXPECT_EQ(count_lines(translated, "D-"), 10);
}

// fairseq-cpp-interactive --replace-unk: a source word outside the dictionary ("猫猫", whose piece
// is <unk> there) keeps its own text in the S- line, and each <unk> of the hypothesis becomes the
// input piece its A- pair names.
TEST_F(ImportedFixture, InteractiveReplacesUnknownWords) {
  testing::TempDir tmp;
  const std::vector<std::string> interactive =
      interactive_with({"--remove-bpe", "none", "--print-alignment", "--unkpen", "-10"});
  const std::string input = "A dog named 猫猫 runs on the grass.\n";
  auto before = testing::run(interactive, {}, input);
  auto after_argv = interactive;
  after_argv.push_back("--replace-unk");
  auto after = testing::run(after_argv, {}, input);
  ASSERT_EQ(before.exit_code, 0) << before.err;
  ASSERT_EQ(after.exit_code, 0) << after.err;
  const Sentence b = sentences(before.out)["0"], a = sentences(after.out)["0"];
  EXPECT_NE(line_of(a.source).find("猫猫"), std::string::npos) << after.out;
  ASSERT_EQ(a.hypothesis.size(), b.hypothesis.size());
  int replaced_words = 0;
  for (size_t t = 0; t < b.hypothesis.size(); ++t) {
    if (b.hypothesis[t] != "<unk>") {
      EXPECT_EQ(a.hypothesis[t], b.hypothesis[t]);
      continue;
    }
    ++replaced_words;
    const auto src = static_cast<size_t>(pair_of(b.alignment[t]).first);
    EXPECT_EQ(a.hypothesis[t], src < b.source.size() ? b.source[src] : "<eos>") << after.out;
  }
  EXPECT_GT(replaced_words, 0) << before.out;

  auto missing = testing::run({testing::program("fairseq-cpp-generate"), testing::fixture_path("data-bin"), "--path",
                               imported_, "--replace-unk", tmp.path() + "/nothing.txt"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("nothing.txt"), std::string::npos) << missing.err;
}

// --quantize: only none or int8, one error line, exit 2; interactive shares the option (issue 22).
TEST_F(ImportedFixture, QuantizeOptionIsCheckedAndInteractiveRunsInt8) {
  const std::vector<std::string> generate{testing::program("fairseq-cpp-generate"), testing::fixture_path("data-bin"),
                                          "--path", imported_, "--gen-subset", "test"};
  auto with = [&](std::vector<std::string> argv, const std::vector<std::string>& extra) {
    argv.insert(argv.end(), extra.begin(), extra.end());
    return testing::run(argv);
  };
  auto bad = with(generate, {"--quantize", "int4"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("quantize"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("int8"), std::string::npos) << "names the valid values:\n" << bad.err;
  EXPECT_EQ(count_lines(bad.err, "fairseq-cpp-generate: error: "), 1) << bad.err;
  auto key = with(generate, {"generation.quantize=fp8"});
  EXPECT_EQ(key.exit_code, 2) << key.err;
  EXPECT_NE(key.err.find("quantize"), std::string::npos) << key.err;
  auto bare = with(generate, {"--quantize"});
  EXPECT_EQ(bare.exit_code, 2) << bare.err;

  const std::vector<std::string> interactive = interactive_with({"--beam", "5", "--quantize", "int8"});
  auto r = testing::run(interactive, {}, "Two boys play soccer against each other.\n");
  if (!nn::int8_linear_supported()) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(nn::int8_linear_unsupported_reason()), std::string::npos) << r.err;
    EXPECT_EQ(count_lines(r.err, "fairseq-cpp-interactive: error: "), 1) << r.err;
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--quantize int8: "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\tZwei Jungen spielen Fußball.\n"), std::string::npos) << r.out;
}

// The H-, D- and P- lines of a run, sorted (the log's timings and the order of batches left out).
std::string hypothesis_lines(const std::string& out) {
  std::vector<std::string> kept;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("H-", 0) == 0 || line.rfind("D-", 0) == 0 || line.rfind("P-", 0) == 0) kept.push_back(line);
  std::sort(kept.begin(), kept.end());
  std::string joined;
  for (const auto& line : kept) joined += line + "\n";
  return joined;
}

// fairseq's --retain-dropout: dropout stays active at inference, so the seed changes the scores and
// outputs; without it the seed changes nothing (beam search and scoring draw no random numbers).
// fairseq-interactive's --constraints on the fixture model: the phrases after the source's TAB
// appear in every output (with --nbest 3), in their order (ordered) or in any (unordered); each is
// printed as a C- line. Unconstrained, the first sentence gives "Zwei Jungen spielen Fußball."
TEST_F(ImportedFixture, InteractiveConstraintsAppearInEveryOutput) {
  const std::string input =
      "Two boys play soccer against each other.\tKinder\n"
      "A dog runs through the snow.\tauf der Wiese\tschnell\n";
  for (const std::string mode : {"ordered", "unordered"}) {
    auto r = testing::run(interactive_with({"--constraints", mode, "--beam", "5", "--nbest", "3"}), {}, input);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("C-0\tKinder\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("C-1\tauf der Wiese\nC-1\tschnell\n"), std::string::npos) << r.out;
    EXPECT_EQ(count_lines(r.out, "H-0\t"), 3) << r.out;
    EXPECT_EQ(count_lines(r.out, "H-1\t"), 3) << r.out;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("H-0\t", 0) == 0) {
        EXPECT_NE(line.find("Kinder"), std::string::npos) << mode << ": " << line;
      }
      if (line.rfind("H-1\t", 0) != 0) continue;
      const size_t wiese = line.find("auf der Wiese"), fast = line.rfind("schnell");
      EXPECT_NE(wiese, std::string::npos) << mode << ": " << line;
      EXPECT_NE(fast, std::string::npos) << mode << ": " << line;
      if (mode == "ordered") {
        EXPECT_LT(wiese, fast) << line;
      }
    }
  }
  // Without --constraints a TAB is part of the source; with sampling, constraints are refused.
  auto sampling = testing::run(interactive_with({"--constraints", "--sampling"}), {}, input);
  EXPECT_EQ(sampling.exit_code, 2);
  EXPECT_NE(sampling.err.find("`generation.constraints` must be empty (off) with `generation.sampling`"),
            std::string::npos)
      << sampling.err;
}

TEST_F(ImportedFixture, RetainDropoutKeepsDropoutActiveAtInference) {
  auto generate = [&](const std::string& seed, const std::vector<std::string>& flags, int sentences) {
    std::vector<std::string> argv{testing::program("fairseq-cpp-generate"),
                                  testing::fixture_path("data-bin"),
                                  "--path",
                                  imported_,
                                  "--seed",
                                  seed};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = testing::run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count_lines(r.out, "H-"), sentences) << r.out;
    return hypothesis_lines(r.out);
  };
  // generate's seed also orders the batches, and with it which sentences a shard holds (and
  // the padding of each): a shard under one seed, searched and teacher-forced (--score-reference).
  for (const std::string mode : {"--beam", "--score-reference"}) {
    std::vector<std::string> flags{"--batch-size", "5", "--num-shards", "100", "--beam", "2"};
    if (mode == "--score-reference") flags.push_back(mode);
    std::vector<std::string> retain = flags;
    retain.push_back("--retain-dropout");
    const std::string plain = generate("1", flags, 10);
    EXPECT_EQ(generate("1", flags, 10), plain) << mode;
    EXPECT_NE(generate("1", retain, 10), plain) << mode;
  }
  const std::string input = "Two boys play soccer against each other.\nA dog runs through the snow.\n";
  auto interactive = [&](const std::string& seed, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = interactive_with({"--beam", "2", "--seed", seed});
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto r = testing::run(argv, {}, input);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count_lines(r.out, "H-"), 2) << r.out;
    return hypothesis_lines(r.out);
  };
  EXPECT_EQ(interactive("1", {}), interactive("2", {}));
  EXPECT_NE(interactive("1", {"--retain-dropout"}), interactive("2", {"--retain-dropout"}));

  for (const char* program : {"fairseq-cpp-generate", "fairseq-cpp-interactive"}) {
    auto help = testing::run({testing::program(program), "--help"});
    EXPECT_EQ(help.exit_code, 0) << help.err;
    EXPECT_NE(help.out.find("generation.retain_dropout (--retain-dropout)"), std::string::npos) << program;
  }
}

}  // namespace
}  // namespace fairseq_cpp
