// libFuzzer target for the safetensors parser: any input must either parse into tensors whose
// byte ranges lie inside the buffer, or throw kinfer::Error. Crashes, hangs, sanitizer reports
// and other exception types are bugs.
//
// The parser comes from libkinfer_convert, which the fuzzing build compiles with the coverage
// instrumentation and the sanitizers.
#include "convert/safetensors.h"

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Copy so that reads past the end of the input are caught by ASan.
    std::vector<uint8_t> buf(data, data + size);
    try {
        auto f = kinfer::convert::SafetensorsFile::from_memory(buf.data(), buf.size(), "fuzz.safetensors");
        float tmp[64];
        for (const auto& t : f->tensors()) {
            // Touch the first and last byte of every tensor, and convert a few elements.
            if (t.nbytes() > 0) {
                volatile uint8_t a = t.data[0], b = t.data[t.nbytes() - 1];
                (void)a, (void)b;
            }
            if (kinfer::convert::dtype_is_float(t.dtype)) {
                const size_t n = std::min<size_t>(64, t.nbytes() / kinfer::convert::dtype_size(t.dtype));
                kinfer::convert::to_f32(t.dtype, t.data, tmp, n);
            }
            (void)f->find(t.name);
        }
    } catch (const kinfer::Error&) {
    }
    return 0;
}
