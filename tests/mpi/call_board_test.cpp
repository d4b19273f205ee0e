// The node's call board, where the light divergence check posts each call's record for the other
// members on the node to read (comm/call_board.hpp): every rank finds every other rank's row, a
// group's id is the same on all its members and distinct among each member's groups, and a
// reader takes a record only when it is whole and of the call it asks about.
#include <catch2/catch.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <dax/comm/call_board.hpp>

#include "helpers.hpp"

namespace {

using dax::detail::CallBoard;
using dax::detail::CallRecord;

CallRecord record(int64_t number, int64_t count, int world_rank, const char* kind) {
  CallRecord r;
  r.number = number;
  r.count = count;
  r.type = 3;
  r.world_rank = world_rank;
  std::strncpy(r.kind, kind, sizeof(r.kind) - 1);
  r.check = dax::detail::call_record_check(r);
  return r;
}

}  // namespace

TEST_CASE("call board: rows, group ids and records", "[call_board]") {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto board = CallBoard::create(MPI_COMM_WORLD);
  REQUIRE(board != nullptr);  // every node has one: its ranks share memory

  // The world ranks on this node (all of them, unless the suite runs as two nodes:
  // tests/reliability/two_nodes.sh).
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  std::vector<int> node_ranks(static_cast<size_t>(node_size));
  MPI_Allgather(&rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, node);
  MPI_Comm_free(&node);
  const auto here = [&](int w) { return std::find(node_ranks.begin(), node_ranks.end(), w) != node_ranks.end(); };

  // Every world rank on this node has a distinct row; ranks elsewhere and past the world have none.
  std::set<int> rows;
  for (int w = 0; w < size; ++w) {
    const int row = board->node_rank_of(w);
    if (!here(w)) {
      CHECK(row == -1);
      continue;
    }
    CHECK(row >= 0);
    CHECK(row < node_size);
    rows.insert(row);
  }
  CHECK(static_cast<int>(rows.size()) == node_size);
  CHECK(board->node_rank_of(size) == -1);
  CHECK(board->node_rank_of(-1) == -1);

  // Ids: the world, then halves by parity, then the world again. Each group's members agree on its
  // id, and no member uses one id for two of its groups.
  MPI_Comm halves = MPI_COMM_NULL, world2 = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &halves);
  MPI_Comm_dup(MPI_COMM_WORLD, &world2);
  const int ids[3] = {board->agree_group_id(MPI_COMM_WORLD), board->agree_group_id(halves),
                      board->agree_group_id(world2)};
  CHECK(ids[0] >= 0);
  CHECK(ids[1] > ids[0]);
  CHECK(ids[2] > ids[1]);
  for (int g = 0; g < 3; ++g) {
    const MPI_Comm comm = g == 1 ? halves : MPI_COMM_WORLD;
    int lo = 0, hi = 0;
    MPI_Allreduce(&ids[g], &lo, 1, MPI_INT, MPI_MIN, comm);
    MPI_Allreduce(&ids[g], &hi, 1, MPI_INT, MPI_MAX, comm);
    CHECK(lo == ids[g]);
    CHECK(hi == ids[g]);
  }

  // Records: each rank posts call #k of the world group, then reads every rank's. A slot holding
  // call #k reads as that call; asked about another call number it must not be taken for it.
  const int group = ids[2];
  const int64_t k = 5 + rank % 3;  // ranks differ, as a divergent program's would
  const std::string kind = rank % 2 ? "all_gather" : "all_reduce";
  dax::detail::post_call_record(board->slot(board->node_rank_of(rank), group, k),
                                record(k, 10 + rank, rank, kind.c_str()));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int w = 0; w < size; ++w) {
    if (!here(w)) continue;  // its row is on its own node's board
    const int64_t theirs = 5 + w % 3;
    CallRecord got;
    REQUIRE(dax::detail::read_call_record(board->slot(board->node_rank_of(w), group, theirs), got));
    CHECK(got.number == theirs);
    CHECK(got.count == 10 + w);
    CHECK(got.world_rank == w);
    CHECK(std::string(got.kind) == (w % 2 ? "all_gather" : "all_reduce"));
    // Call theirs + kDepth shares the slot: the record there says it is call `theirs`.
    REQUIRE(dax::detail::read_call_record(board->slot(board->node_rank_of(w), group, theirs + CallBoard::kDepth), got));
    CHECK(got.number == theirs);
    // The next call's slot is empty; another group's slot too.
    CHECK_FALSE(dax::detail::read_call_record(board->slot(board->node_rank_of(w), group, theirs + 1), got));
    CHECK_FALSE(dax::detail::read_call_record(board->slot(board->node_rank_of(w), ids[0], theirs), got));
  }

  // A record whose words do not match its check (half written) is not taken.
  CallRecord torn = record(1, 2, rank, "all_to_all");
  torn.count = 3;
  CallRecord got;
  CHECK_FALSE(dax::detail::read_call_record(torn, got));

  MPI_Barrier(MPI_COMM_WORLD);  // nobody reads a row after its owner frees the board
  MPI_Comm_free(&halves);
  MPI_Comm_free(&world2);
}
