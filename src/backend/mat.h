// A view of a weight matrix in some backend's memory: `rows` rows of `cols` elements of a ggml
// type, each row_bytes long. A 3-D tensor (experts, heads) is a Mat whose rows are every slice's
// rows one after another; slice(i) picks one. The view carries the tensor's name so that a
// backend refusing it (wrong memory, bad shape) can say which tensor it was.
#pragma once
#include "quant/type_facts.h"

#include <cstddef>
#include <cstdint>

namespace kinfer::backend {

struct Mat {
    quant::Type type = quant::Type::F32;
    int64_t cols = 0;
    int64_t rows = 0;
    const uint8_t* data = nullptr;
    size_t row_bytes = 0;
    int64_t slice_rows = 0;          // rows of one slice of a 3-D tensor (ne[1]); 0 = 2-D
    const char* name = "";           // the GGUF tensor name, for error messages

    const uint8_t* row(int64_t r) const { return data + size_t(r) * row_bytes; }
    size_t bytes() const { return size_t(rows) * row_bytes; }
    // Slice i2 of a 3-D tensor (expert e, head h).
    Mat slice(int64_t i2) const {
        Mat m = *this;
        m.rows = slice_rows;
        m.data = data + size_t(i2) * size_t(slice_rows) * row_bytes;
        m.slice_rows = 0;
        return m;
    }
};

}  // namespace kinfer::backend
