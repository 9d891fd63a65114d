// The vision projector file (llama.cpp's mmproj GGUF, `clip` architecture, projector `kimik3`):
// the MoonViT tower's hyper-parameters and weights, placed in one backend's memory.
//
//   auto mm = kinfer::vision::Mmproj::load("mmproj.gguf", backend);
//   mm->hparams().n_embd;  mm->blocks()[0].qkv ...
//
// Tensor names and shapes: ../shared/golden/vision/README.md section 3.2 (the Q/K rows of
// attn_qkv are already de-interleaved for the split 2-D RoPE).
#pragma once
#include "backend/backend.h"
#include "gguf/reader.h"
#include "vision/preprocess.h"

#include <memory>
#include <string>
#include <vector>

namespace kinfer::vision {

struct VisionHParams {
    std::string projector;        // clip.projector_type ("kimik3")
    int n_embd = 0;               // tower width (embedding_length)
    int n_ff = 0;
    int n_layer = 0;
    int n_head = 0;
    int head_dim = 0;             // n_head * head_dim may differ from n_embd (the fused QKV is wider)
    int proj_dim = 0;             // the text model's n_embd
    int pos_w = 0, pos_h = 0;     // learned position grid
    float eps = 1e-5f;            // every norm of tower and projector (layer_norm_epsilon)
    float rope_theta = 10000.0f;
    PreprocConfig pre;            // patch, merge (projector.scale_factor), pixel limits, mean / std
    int q_dim() const { return n_head * head_dim; }
    int merged_dim() const { return n_embd * pre.merge * pre.merge; }
};

struct VisionBlock {
    const float* ln1 = nullptr;   // norm0 [n_embd]
    backend::Mat qkv;             // [3 * q_dim x n_embd]: Q | K | V
    backend::Mat out;             // [n_embd x q_dim]
    const float* ln2 = nullptr;
    backend::Mat up;              // fc0 [n_ff x n_embd]
    backend::Mat down;            // fc1 [n_embd x n_ff]
};

class Mmproj {
public:
    // Reads and checks the file (keys, every tensor's presence, type and shape), then copies the
    // weights into be's memory. Throws kinfer::Error naming the file and what is wrong.
    static std::unique_ptr<Mmproj> load(const std::string& path, backend::Backend& be);
    ~Mmproj();
    Mmproj(const Mmproj&) = delete;
    Mmproj& operator=(const Mmproj&) = delete;

    const VisionHParams& hparams() const { return hp_; }
    const std::string& path() const { return path_; }
    backend::Backend& backend() const { return be_; }

    // Patch embedding [n_embd x 3*patch*patch], (c, ky, kx) order; F16 when the file has F32 or
    // F16 (ggml's conv_2d multiplies in f16), else the file's type.
    const backend::Mat& patch() const { return patch_; }
    // The learned position grid on the host, [pos_h][pos_w][n_embd] (it is resampled per image).
    const std::vector<float>& pos_grid() const { return pos_; }
    const std::vector<VisionBlock>& blocks() const { return blocks_; }
    const float* post_ln() const { return post_ln_; }
    const backend::Mat& mm1() const { return mm1_; }   // [merged x merged]
    const backend::Mat& mm2() const { return mm2_; }   // [proj_dim x merged]
    const float* mm_post_norm() const { return mm_norm_; }

private:
    Mmproj(std::string path, backend::Backend& be) : path_(std::move(path)), be_(be) {}
    backend::Mat place_mat(const gguf::TensorInfo& t, std::initializer_list<int64_t> ne, bool as_f16 = false);
    const float* place_vec(const gguf::TensorInfo& t, int64_t n);

    std::string path_;
    backend::Backend& be_;
    std::unique_ptr<gguf::File> file_;   // kept open: the Mats' names point into its tensor table
    VisionHParams hp_;
    std::vector<backend::Buffer> bufs_;
    backend::Mat patch_, mm1_, mm2_;
    std::vector<float> pos_;
    std::vector<VisionBlock> blocks_;
    const float* post_ln_ = nullptr;
    const float* mm_norm_ = nullptr;
};

// True when the GGUF at path is a clip / mmproj file (general.architecture "clip").
bool is_mmproj_file(const gguf::File& f);

}  // namespace kinfer::vision
