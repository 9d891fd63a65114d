// chat's saved states and state snapshots (issue 15 items 3 and 4), driven through ChatRepl on
// the shipped tiny models: /save-state + /load-state in a fresh session continue exactly like the
// uninterrupted chat, bad files are refused with the chat unchanged, and /regen or an edit go
// back to the nearest KDA + conv snapshot, re-reading only what follows it, with the same
// tokens and logits as a re-read from the start.
#include "cli_util.h"

#include "cli/lib/chat_repl.h"
#include "common/error.h"
#include "model/session_file.h"
#include "vision/media_prompt.h"

#include <doctest/doctest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

using namespace kinfer;
using namespace kinfer::test;

namespace {

struct Loaded {
    std::unique_ptr<model::Model> m;
    std::unique_ptr<text::Tokenizer> tok;
};

Loaded load_path(const std::string& path) {
    Loaded l;
    l.m = model::Model::load(path);
    l.tok = text::Tokenizer::from_gguf(l.m->file());
    return l;
}
Loaded load(const std::string& name) { return load_path(tiny_model(name)); }

// A chat as `kinfer chat -n 8 --temp 0 -b 32 -t 2` would run it, on its own session.
struct Chat {
    std::unique_ptr<model::Session> s;
    std::unique_ptr<cli::ChatRepl> repl;
    Chat(const Loaded& l, int64_t snapshot_every, const std::string& mmproj = "") {
        s = std::make_unique<model::Session>(*l.m, model::SessionOptions{.n_ctx = 2048, .n_batch = 32, .n_threads = 2,
                                                                          .cache_type = backend::CacheType::f16});
        cli::ChatConfig cfg;
        cfg.args.n_predict = 8;
        cfg.args.sampling.temperature = 0;
        cfg.format = cli::pick_chat_format(cfg.args, *l.tok);
        cfg.opts = cli::chat_options(cfg.args);
        cfg.snapshot_every = snapshot_every;
        cfg.mmproj = mmproj;
        repl = std::make_unique<cli::ChatRepl>(*s, *l.tok, cfg);
    }
    void say(const std::string& line) { REQUIRE(repl->handle(line)); }
};

// About 400 tokens of real text: the first message of the snapshot tests.
std::string long_message() {
    std::ifstream f(data("text/gpl-3.txt"));
    std::string t((std::istreambuf_iterator<char>(f)), {});
    REQUIRE(t.size() > 2000);
    return "Summarise this: " + t.substr(0, 1800);
}

std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
}
// The largest |a - b| and the largest |b|: two chats' logits compared at rounding level.
std::pair<double, double> logit_gap(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, double(std::fabs(a[i] - b[i])));
        scale = std::max(scale, double(std::fabs(b[i])));
    }
    return {worst, scale};
}

void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

}  // namespace

TEST_CASE("chat state: saved after a turn and loaded in a fresh session, the next reply is the uninterrupted one") {
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        CAPTURE(std::string(name));
        const Loaded l = load(name);
        const std::string path = temp_path("chat.state");
        Chat a(l, -1);
        a.say("Hello there, what is a kernel?");
        a.say("/save-state " + path);
        const size_t after_one = a.s->tokens().size();
        a.say("And a second question?");

        Chat b(l, -1);
        b.say("/load-state " + path);
        CHECK(b.s->tokens().size() == after_one);
        CHECK(b.repl->messages().size() == 2);
        b.say("And a second question?");
        CHECK(b.s->tokens() == a.s->tokens());   // the same prompt and the same greedy reply
        CHECK(b.s->logits() == a.s->logits());   // bit for bit: the state is a copy, the arithmetic the same
        CHECK(b.repl->messages().back().content == a.repl->messages().back().content);
        CHECK(b.repl->counters().last_prefilled == a.repl->counters().last_prefilled);   // only the new message
        CHECK(b.repl->counters().full_reprefills == 0);
        MESSAGE(name << ": state file " << std::filesystem::file_size(path) << " bytes for " << after_one << " tokens");
        std::filesystem::remove(path);
    }
}

TEST_CASE("chat state: a sampled chat continues with the same draws (the sampler's state is saved)") {
    const Loaded l = load("kl-tiny-a-Q4_K_M");
    const std::string path = temp_path("sampled.state");
    model::Session sa(*l.m, {.n_ctx = 1024, .n_batch = 32, .n_threads = 2, .cache_type = backend::CacheType::f16});
    model::Session sb(*l.m, {.n_ctx = 1024, .n_batch = 32, .n_threads = 2, .cache_type = backend::CacheType::f16});
    cli::ChatConfig cfg;
    cfg.args.n_predict = 8;
    cfg.args.sampling.temperature = 0.9f;
    cfg.args.sampling.seed = 7;
    cfg.format = cli::pick_chat_format(cfg.args, *l.tok);
    cfg.opts = cli::chat_options(cfg.args);
    cli::ChatRepl a(sa, *l.tok, cfg), b(sb, *l.tok, cfg);
    a.handle("hi");
    a.handle("/save-state " + path);
    a.handle("more");
    b.handle("/load-state " + path);
    b.handle("more");
    CHECK(sb.tokens() == sa.tokens());
    std::filesystem::remove(path);
}

TEST_CASE("chat state: a file from another model, truncated, damaged or without a conversation is refused; the chat keeps its state") {
    const Loaded k3 = load("k3-tiny-a-Q4_K_M"), kl = load("kl-tiny-a-Q4_K_M");
    const std::string good = temp_path("good.state"), bad = temp_path("bad.state"), cache = temp_path("cache.state");
    {
        Chat a(k3, -1);
        a.say("Hello there");
        a.say("/save-state " + good);
        model::save_session_file(*a.s, cache);   // what run --prompt-cache writes: no conversation
    }
    const std::vector<uint8_t> bytes = read_bytes(good);
    auto refused = [&](const Loaded& l, const std::string& file, const std::string& why) {
        CAPTURE(why);
        Chat c(l, -1);
        c.say("Good morning");
        const auto tokens = c.s->tokens();
        const auto logits = c.s->logits();
        const auto msgs = c.repl->messages();
        try {
            c.repl->handle("/load-state " + file);
            FAIL("accepted");
        } catch (const Error& e) {
            const std::string msg = e.what();
            INFO(msg);
            CHECK(msg.find(why) != std::string::npos);
            CHECK(msg.rfind(file, 0) == 0);   // names the file
            CHECK(msg.find('\n') == std::string::npos);
        }
        CHECK(c.s->tokens() == tokens);
        CHECK(c.s->logits() == logits);
        CHECK(c.repl->messages().size() == msgs.size());
        CHECK(c.repl->messages().back().content == msgs.back().content);
        // It goes on from where it was: the next turn reads only the new message.
        c.say("And now?");
        CHECK(c.repl->counters().full_reprefills == 0);
        CHECK(c.repl->counters().resumes == 0);
    };
    refused(kl, good, "another model");
    write_bytes(bad, std::vector<uint8_t>(bytes.begin(), bytes.begin() + std::ptrdiff_t(bytes.size() / 2)));
    refused(k3, bad, "damaged or truncated");
    auto flipped = bytes;
    flipped[flipped.size() * 3 / 4] ^= 0x04;
    write_bytes(bad, flipped);
    refused(k3, bad, "checksum mismatch");
    refused(k3, cache, "holds no conversation");
    for (const auto& p : {good, bad, cache}) std::filesystem::remove(p);
}

TEST_CASE("chat snapshots: /regen and an edit go back to the nearest snapshot; the same tokens and logits as a re-read") {
    const std::string msg = long_message();
    // The edit changes the message's last words: every token before them stays.
    const size_t cut = msg.rfind(' ', msg.size() - 40);
    const std::string edited = msg.substr(0, cut) + " and then some other words at the end.";
    const std::string conv = temp_path("edited.json");
    {
        std::ofstream f(conv);
        f << nlohmann::json{{"messages", {{{"role", "user"}, {"content", edited}}}}}.dump();
    }
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        CAPTURE(std::string(name));
        const Loaded l = load(name);
        Chat snap(l, 64), full(l, 0);
        for (Chat* c : {&snap, &full}) c->say(msg);
        const int64_t prompt = snap.repl->counters().last_prefilled;
        CHECK(prompt > 300);
        CHECK(snap.s->tokens() == full.s->tokens());
        CHECK(snap.s->logits() == full.s->logits());   // cutting the chunks at the snapshots changes nothing

        // /regen: the snapshot at the end of the prompt; nothing is read again.
        for (Chat* c : {&snap, &full}) c->say("/regen");
        CHECK(snap.repl->counters().last_prefilled == 0);
        CHECK(snap.repl->counters().resumes == 1);
        CHECK(snap.repl->counters().last_resume_pos == prompt);
        CHECK(full.repl->counters().last_prefilled == prompt);
        CHECK(full.repl->counters().full_reprefills == 1);
        CHECK(snap.s->tokens() == full.s->tokens());
        CHECK(snap.s->logits() == full.s->logits());

        // An edit of the message's end: back to the last grid snapshot before it.
        for (Chat* c : {&snap, &full}) {
            c->say("/load " + conv);
            c->say("/regen");   // answers the loaded conversation, which ends with the user message
        }
        const auto& sc = snap.repl->counters();
        MESSAGE(name << ": prompt " << prompt << " tokens; the edit went back to " << sc.last_resume_pos << " and read "
                     << sc.last_prefilled << " tokens, against " << full.repl->counters().last_prefilled << " from the start");
        CHECK(sc.resumes == 2);
        CHECK(sc.last_resume_pos % 64 == 0);
        CHECK(sc.last_resume_pos >= prompt - 64 - 16);   // the edit is within the last few tokens
        CHECK(sc.last_prefilled < 64 + 24);
        CHECK(full.repl->counters().last_resume_pos == 0);
        CHECK(full.repl->counters().full_reprefills == 2);
        CHECK(snap.s->tokens() == full.s->tokens());
        CHECK(snap.s->logits() == full.s->logits());   // bit for bit: the same chunks over the same tokens
    }
    std::filesystem::remove(conv);
}

TEST_CASE("chat snapshots: the default spacing follows memory and is a multiple of the batch") {
    const Loaded l = load("k3-tiny-a-Q4_K_M");
    model::Session s(*l.m, {.n_ctx = 4096, .n_batch = 32, .n_threads = 2, .cache_type = backend::CacheType::f16});
    const int64_t every = cli::default_snapshot_every(s);
    CHECK(every % 32 == 0);
    CHECK(every >= 4 * 32);
    // One snapshot costs about the latent cache of `every` tokens (rounded up to the batch).
    const double ratio = double(s.snapshot_bytes()) / double(s.latent_bytes_per_token());
    CHECK(double(every) >= std::min(ratio, double(every)));
    CHECK(double(every) <= std::max(ratio + 32, 4.0 * 32));
    MESSAGE("k3-tiny-a: a snapshot is " << s.snapshot_bytes() << " bytes, the latent cache " << s.latent_bytes_per_token()
                                        << " bytes per token: one every " << every << " tokens");
}

TEST_CASE("chat snapshots: Ctrl-C while reading a message goes back to the turn's start; the next turn is as if it was never sent") {
    const Loaded l = load("k3-tiny-a-Q4_K_M");
    Chat a(l, -1), b(l, -1);
    a.say("Hello there");
    b.say("Hello there");
    const auto before = a.s->tokens();
    const int64_t start = a.s->n_past();
    bool raised = false;
    // Ctrl-C arrives while the second chunk of the message is read (the chat's SIGINT handler
    // is in place during a turn; the prefill stops after that chunk).
    a.s->on_layer = [&](int, int64_t pos0, int64_t, const float*) {
        if (!raised && pos0 >= start + 32) {
            raised = true;
            std::raise(SIGINT);
        }
    };
    a.say(long_message());
    a.s->on_layer = nullptr;
    REQUIRE(raised);
    CHECK(a.s->tokens() == before);
    CHECK(a.repl->messages().size() == 2);
    a.say("And now?");
    b.say("And now?");
    CHECK(a.repl->counters().full_reprefills == 0);
    CHECK(a.repl->counters().last_prefilled == b.repl->counters().last_prefilled);
    CHECK(a.s->tokens() == b.s->tokens());
    CHECK(a.s->logits() == b.s->logits());
}

TEST_CASE("chat snapshots: an edit of the last message goes back to its turn's start, not before the last reply") {
    const Loaded l = load("k3-tiny-a-Q4_K_M");
    const std::string saved = temp_path("two.json"), edited = temp_path("two-edited.json");
    Chat snap(l, 64), full(l, 0);
    for (Chat* c : {&snap, &full}) c->say(long_message());
    const int64_t turn2 = snap.s->n_past();   // the end of the first reply: decoded, no grid snapshot
    for (Chat* c : {&snap, &full}) c->say("Now tell me about the warranty, in a few words.");
    REQUIRE(snap.s->tokens() == full.s->tokens());
    snap.say("/save " + saved);
    {
        std::ifstream in(saved);
        auto j = nlohmann::json::parse(in);
        j["messages"][2]["content"] = "Now tell me about the licence, in a few words.";
        j["messages"].erase(3);   // the reply to it goes
        std::ofstream(edited) << j.dump();
    }
    REQUIRE(snap.repl->messages().size() == 4);
    for (Chat* c : {&snap, &full}) {
        c->say("/load " + edited);
        c->say("/regen");
    }
    const auto& sc = snap.repl->counters();
    const int64_t whole = full.repl->counters().last_prefilled;
    MESSAGE("edit of turn 2: went back to " << sc.last_resume_pos << ", read " << sc.last_prefilled << " tokens, against "
                                            << whole << " from the start");
    CHECK(sc.last_resume_pos >= turn2);         // the turn's own snapshot (or a grid one inside its message)
    CHECK(sc.last_prefilled <= whole - turn2);  // at most this turn's prompt
    CHECK(whole > 300);
    CHECK(snap.s->tokens() == full.s->tokens());
    // The first reply was decoded token by token in both chats, but the full re-read prefills it
    // in chunks: GEMM instead of GEMV for the projections, so the states after it need only agree
    // to rounding (with Q4_K weights and Q8 activations the dot products are integer sums, and
    // the difference was 0 on the AVX2 machine this was written on).
    const auto& a = snap.s->logits();
    const auto& b = full.s->logits();
    REQUIRE(a.size() == b.size());
    const auto gap = logit_gap(a, b);   // not a structured binding: clang refuses them in doctest macros
    const double worst = gap.first, scale = gap.second;
    MESSAGE("largest logit difference " << worst << " (largest logit " << scale << ")");
    CHECK(worst <= 1e-3 * scale);
    std::filesystem::remove(saved);
    std::filesystem::remove(edited);
}

// Images in chat, on the tiny K3 with a vision tower (its text GGUF lives in ../shared/golden).
namespace {

struct VisionFiles {
    std::string gguf, mmproj, photo, tall;
    bool ok() const { return !gguf.empty() && !mmproj.empty() && !photo.empty() && !tall.empty(); }
};

VisionFiles vision_files() {
    return {vision_chat_file("gguf/k3v-tiny-f32.gguf"), vision_chat_file("gguf/mmproj-k3v-tiny-f32.gguf"),
            vision_chat_file("images/photo_150x97.png"), vision_chat_file("images/tall_61x203.jpg")};
}

std::vector<int32_t> ids_of(const std::string& line) {
    std::vector<int32_t> v;
    std::istringstream in(line);
    for (int32_t id; in >> id;) v.push_back(id);
    return v;
}

}  // namespace

TEST_CASE("chat images: the first turn reads what run --chat reads, image rows at the marker, and gives its greedy reply") {
    const VisionFiles v = vision_files();
    if (!v.ok()) return;
    const Loaded l = load_path(v.gguf);
    for (const std::string msg : {"Describe this image.", "Here <__media__> is a photo."}) {
        CAPTURE(msg);
        Chat c(l, -1, v.mmproj);
        c.say("/image " + v.photo);
        REQUIRE(c.repl->pending_images().size() == 1);
        c.say(msg);
        CHECK(c.repl->pending_images().empty());
        REQUIRE(c.repl->message_images().at(0).size() == 1);
        const int64_t rows = c.repl->message_images()[0][0]->n_rows;
        CHECK(rows == 15);

        // What run lays out: the user message with the image in front of its text (or at the
        // marker), rendered, then split at the marker.
        cli::ChatConfig cfg;
        const auto format = cli::pick_chat_format(cfg.args, *l.tok);
        const std::string rendered =
            text::render_chat(format, {{"user", vision::with_media_markers(msg, 1), "", ""}}, cli::chat_options(cfg.args));
        std::vector<int32_t> expect;
        for (const auto& ch : vision::layout_media_prompt(*l.tok, rendered, 1)) {
            if (ch.is_image()) expect.insert(expect.end(), size_t(rows), -1);
            else expect.insert(expect.end(), ch.tokens.begin(), ch.tokens.end());
        }
        const auto& held = c.s->tokens();
        REQUIRE(held.size() > expect.size());
        CHECK(std::vector<int32_t>(held.begin(), held.begin() + std::ptrdiff_t(expect.size())) == expect);
        CHECK(c.repl->counters().last_prefilled == int64_t(expect.size()));

        // The greedy reply is run's, token for token (run with the chat's batch, -b 32).
        const auto r = run_command(quiet(quote(kinfer_bin()) + " run --chat -m " + quote(v.gguf) + " --mmproj " + quote(v.mmproj) +
                                         " --image " + quote(v.photo) + " -p " + quote(msg) +
                                         " -n 8 --temp 0 -t 2 -b 32 -c 2048 --print-ids"));
        REQUIRE(r.rc == 0);
        const auto run_ids = ids_of(r.out);
        REQUIRE(run_ids.size() == 8);
        const std::vector<int32_t> chat_ids(held.begin() + std::ptrdiff_t(expect.size()), held.end());
        CHECK(chat_ids == std::vector<int32_t>(run_ids.begin(), run_ids.begin() + std::ptrdiff_t(chat_ids.size())));
        CHECK(chat_ids.size() >= 7);   // the last token is not fed back
    }
}

TEST_CASE("chat images: an edit after the image goes back to a snapshot after it; a re-read from the start feeds its rows again") {
    const VisionFiles v = vision_files();
    if (!v.ok()) return;
    const Loaded l = load_path(v.gguf);
    const std::string saved = temp_path("img-two.json"), edited = temp_path("img-two-edited.json");
    Chat snap(l, 32, v.mmproj), full(l, 0, v.mmproj);
    for (Chat* c : {&snap, &full}) {
        c->say("/image " + v.photo);
        c->say("What is in this picture? Tell me in a few words.");
    }
    const int64_t turn2 = snap.s->n_past();
    for (Chat* c : {&snap, &full}) c->say("And what colours does it have?");
    // (The logits are not compared here: the second turn starts at 159, so the grid cut at 160
    // makes a one-token chunk, which takes the decode path and agrees only to rounding.)
    REQUIRE(snap.s->tokens() == full.s->tokens());
    snap.say("/save " + saved);
    {
        std::ifstream in(saved);
        auto j = nlohmann::json::parse(in);
        j["messages"][2]["content"] = "And what shapes does it have?";
        j["messages"].erase(3);
        std::ofstream(edited) << j.dump();
    }
    for (Chat* c : {&snap, &full}) {
        c->say("/load " + edited);
        c->say("/regen");
    }
    const auto& sc = snap.repl->counters();
    CHECK(sc.resumes == 1);
    CHECK(sc.last_resume_pos >= turn2);   // the loaded image is the held one: nothing before the edit is read
    CHECK(full.repl->counters().full_reprefills == 1);
    CHECK(full.repl->counters().last_prefilled > turn2);
    CHECK(snap.s->tokens() == full.s->tokens());
    // The first reply was decoded in both, and the re-read from the start prefills it (see the
    // text test above): rounding only. Rows fed wrongly, or not at all, move the logits by far more.
    const auto& a = snap.s->logits();
    const auto& b = full.s->logits();
    REQUIRE(a.size() == b.size());
    const auto gap = logit_gap(a, b);   // not a structured binding: clang refuses them in doctest macros
    const double worst = gap.first, scale = gap.second;
    MESSAGE("image chat edit: back to " << sc.last_resume_pos << " of " << snap.s->n_past() << "; largest logit difference "
                                        << worst << " (largest logit " << scale << ")");
    CHECK(worst <= 1e-3 * scale);
    std::filesystem::remove(saved);
    std::filesystem::remove(edited);
}

TEST_CASE("chat images: /save-state and /load-state keep the image; a changed or missing image file refuses the state") {
    const VisionFiles v = vision_files();
    if (!v.ok()) return;
    const Loaded l = load_path(v.gguf);
    const std::string img = temp_path("state-photo.png"), path = temp_path("img-chat.state");
    std::filesystem::copy_file(v.photo, img, std::filesystem::copy_options::overwrite_existing);
    Chat a(l, -1, v.mmproj);
    a.say("/image " + img);
    a.say("Describe this image.");
    a.say("/save-state " + path);
    const size_t after_one = a.s->tokens().size();
    a.say("And the colours?");

    Chat b(l, -1, v.mmproj);
    b.say("/load-state " + path);
    CHECK(b.s->tokens().size() == after_one);
    REQUIRE(b.repl->message_images().size() == 2);
    CHECK(b.repl->message_images()[0].size() == 1);
    b.say("And the colours?");
    CHECK(b.s->tokens() == a.s->tokens());
    CHECK(b.s->logits() == a.s->logits());
    CHECK(b.repl->counters().full_reprefills == 0);   // the held image was recognised: only the new message read
    CHECK(b.repl->counters().last_prefilled == a.repl->counters().last_prefilled);

    auto refused = [&](const std::string& why) {
        CAPTURE(why);
        Chat c(l, -1, v.mmproj);
        c.say("Good morning");
        const auto tokens = c.s->tokens();
        try {
            c.repl->handle("/load-state " + path);
            FAIL("accepted");
        } catch (const Error& e) {
            const std::string msg = e.what();
            INFO(msg);
            CHECK(msg.find(why) != std::string::npos);
            CHECK(msg.find(img) != std::string::npos);   // names the image
            CHECK(msg.find('\n') == std::string::npos);
        }
        CHECK(c.s->tokens() == tokens);
        CHECK(c.repl->messages().size() == 2);
    };
    std::filesystem::copy_file(v.tall, img, std::filesystem::copy_options::overwrite_existing);   // another picture
    refused("now encodes to other rows");
    std::filesystem::remove(img);
    refused("cannot open");
    // Without --mmproj the state's images cannot be read: refused, saying so.
    Chat t(l, -1);
    CHECK_THROWS_WITH_AS(t.repl->handle("/load-state " + path), doctest::Contains("--mmproj"), Error);
    std::filesystem::remove(path);
}

TEST_CASE("chat images: /clear drops attached images; a marker count that does not match is refused; no --mmproj, no /image") {
    const VisionFiles v = vision_files();
    if (!v.ok()) return;
    const Loaded l = load_path(v.gguf);
    Chat c(l, -1, v.mmproj);
    c.say("/image " + v.photo);
    c.say("/clear");
    CHECK(c.repl->pending_images().empty());
    c.say("hello");
    for (int32_t id : c.s->tokens()) CHECK(id >= 0);   // no image rows
    // A message without images keeps a marker as text.
    c.say("a literal <__media__> here");
    CHECK(c.repl->message_images().back().empty());
    c.say("/image " + v.photo);
    CHECK_THROWS_WITH_AS(c.repl->handle("two <__media__> markers <__media__>"),
                         doctest::Contains("2 <__media__> marker(s) but 1 image(s)"), Error);
    CHECK(c.repl->pending_images().size() == 1);   // still attached for the next try
    Chat t(l, -1);
    CHECK_THROWS_WITH_AS(t.repl->handle("/image " + v.photo), doctest::Contains("--mmproj"), Error);
}
