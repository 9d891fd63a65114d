// The few MPI calls a multi-process run needs, each with a deadline: OpenMPI has no timeout on a
// blocked receive, so every wait here polls (with a backoff that sleeps, so idle ranks leave the
// cores to the busy ones) and gives up with a message naming the peer. Any failure ends the whole
// job at once through abort(), which names this rank and the cause: ranks never wait on a peer
// that is gone.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::dist {

// Message tags: one kind of message per tag, so a receive can never take another's bytes.
enum Tag : int { kTagCommand = 1, kTagResidual = 2, kTagLogits = 3, kTagSlots = 4, kTagStats = 5, kTagLink = 6 };

class Comm {
public:
    // Starts MPI when this process was launched by mpirun / a PMIx launcher (never otherwise,
    // so the single-process binary does not touch MPI). nullptr when not launched so.
    static Comm* start(int* argc, char*** argv);
    static Comm* get();          // the started one, or nullptr
    void finish();               // MPI_Finalize

    int rank() const { return rank_; }
    int size() const { return size_; }
    int local_size() const { return local_size_; }   // ranks on this machine (sharing its cores)
    // Seconds a forward pass waits for a peer before it gives up (--dist-timeout).
    double timeout_s = 600.0;
    uint64_t bytes_sent = 0;     // payload bytes this rank has sent
    double wait_s = 0;           // seconds this rank's sends and receives waited on peers
    // Seconds this rank computed its part of forward passes (their time less wait_s's growth in
    // them): how even the stages are (--dist-stats).
    double busy_s = 0;

    void send(int to, Tag tag, const void* data, size_t bytes);
    // Receives a message of any size; timeout_s < 0 waits for ever (a worker between commands).
    std::vector<uint8_t> recv(int from, Tag tag, double timeout_s);
    // Receives exactly `bytes` bytes into data.
    void recv_into(int from, Tag tag, void* data, size_t bytes, double timeout_s);
    // This rank sends `mine` to every other rank q of `group` (ranks, this one among them) and
    // receives in[q] (indexed by rank, sized by the caller) from it, all at once: an all-gather
    // of messages whose sizes every rank of the group knows.
    void all_gather(const std::vector<uint8_t>& mine, std::vector<std::vector<uint8_t>>& in, Tag tag,
                    const std::vector<int>& group);

    // Prints "kinfer: error: rank R of N (host): why" and ends every rank of the job.
    [[noreturn]] void abort(const std::string& why);

private:
    int rank_ = 0, size_ = 1, local_size_ = 1;
    std::string host_;
};

}  // namespace kinfer::dist
