#include "vision/stb_alloc.h"

#include <cstdlib>

namespace kinfer::vision {

namespace {
thread_local size_t t_cap = 0;   // 0: no cap (stb used outside decode_image)
bool over_cap(size_t bytes) { return t_cap != 0 && bytes > t_cap; }
}  // namespace

StbAllocCap::StbAllocCap(size_t max_bytes) : prev_(t_cap) { t_cap = max_bytes; }
StbAllocCap::~StbAllocCap() { t_cap = prev_; }

void* stb_malloc(size_t bytes) { return over_cap(bytes) ? nullptr : std::malloc(bytes); }
void* stb_realloc(void* p, size_t bytes) { return over_cap(bytes) ? nullptr : std::realloc(p, bytes); }
void stb_free(void* p) { std::free(p); }

}  // namespace kinfer::vision
