#pragma once
// sacremoses' Moses detokenizer, which fairseq's --eval-bleu-detok moses applies to each
// hypothesis before BLEU: MosesDetokenizer(lang).detokenize(line.split()). The rules and their
// quirks are the package's (kSacremosesVersion), so the text it returns is sacremoses' byte for byte.
//
//   moses_detokenize("&quot; Don &apos;t move , &quot; he said .", "en")  // "\"Don't move,\" he said."
//   moses_detokenize("l&apos; homme a dit : &quot; Quoi ? &quot;", "fr")   // "l'homme a dit : \"Quoi ?\""

#include <string>
#include <string_view>

namespace fairseq_cpp::scoring {

// The version of sacremoses whose output we reproduce (tools/requirements.txt).
inline constexpr const char* kSacremosesVersion = "0.2.0";

// Joins the whitespace-separated tokens of `line` (valid UTF-8) back into text: " @-@ " becomes
// "-", Moses' XML escapes (&amp; &lt; &gt; &quot; &apos; &#124; &#91; &#93; and the older &bar;
// &bra; &ket;) are undone, and punctuation, quotes, currency and contractions are attached by the
// rules of `lang`, an ISO code as sacremoses takes it ("en", "fr", "it", "ga", "cs", "ko"; any
// other code gets the rules common to all). One difference: where sacremoses 0.2.0 raises
// TypeError (Czech "-li" and "-mail" after a word ending in an apostrophe), this joins them as
// Moses' detokenizer.perl does.
std::string moses_detokenize(std::string_view line, std::string_view lang);

}  // namespace fairseq_cpp::scoring
