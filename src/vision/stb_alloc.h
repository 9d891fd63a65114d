// stb_image's allocations, capped per thread. stb sizes most buffers from the image's header,
// which decode_image bounds, but its inflate output (a PNG's pixel stream) doubles for as long as
// the deflate stream goes on, up to 2-4 GiB, and the extra bytes are then ignored: a 1 MB file
// declaring 1 x 1 pixels had stb take 2 GiB. decode_image sets a cap from the header's size and
// the file's; an allocation over it fails, which stb reports as "out of memory".
#pragma once
#include <cstddef>

namespace kinfer::vision {

// Sets this thread's cap on any one stb allocation for the object's lifetime (0: none), and puts
// the previous cap back after.
class StbAllocCap {
public:
    explicit StbAllocCap(size_t max_bytes);
    ~StbAllocCap();
    StbAllocCap(const StbAllocCap&) = delete;
    StbAllocCap& operator=(const StbAllocCap&) = delete;

private:
    size_t prev_;
};

// What stb_image_impl.cpp gives stb as STBI_MALLOC / STBI_REALLOC / STBI_FREE: malloc, realloc
// and free, except that a request over the thread's cap returns null (a failed realloc leaves
// the old block to stb, which frees it).
void* stb_malloc(size_t bytes);
void* stb_realloc(void* p, size_t bytes);
void stb_free(void* p);

}  // namespace kinfer::vision
