// libFuzzer target for `kinfer info`'s report over any file the GGUF reader accepts: odd but valid
// metadata (huge counts, wrong types, hyper-parameters that do not load, tensors the model's list
// does not know) must give a report and its text, or throw kinfer::Error. Crashes, hangs,
// sanitizer reports and other exception types are bugs. The reader itself is fuzz_gguf's job.
// Its seed corpus is fuzz_gguf's (tests/fuzz/corpus/gguf; scripts/test.sh).
#include "cli/lib/info_report.h"
#include "gguf/reader.h"

#include <cstdint>
#include <vector>

namespace {
volatile uint64_t g_sink = 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> buf(data, data + size);   // exactly sized: ASan sees any overread
    std::unique_ptr<kinfer::gguf::File> f;
    try {
        f = kinfer::gguf::File::from_memory(buf.data(), buf.size(), "fuzz.gguf");
    } catch (const kinfer::Error&) {
        return 0;
    }
    try {
        kinfer::cli::InfoOptions opt;
        opt.with_tensors = size % 2 == 0;   // both shapes of the report
        const auto r = kinfer::cli::info_report(*f, opt);
        g_sink = g_sink + kinfer::cli::info_text(r).size();
    } catch (const kinfer::Error&) {
    }
    return 0;
}
