#!/usr/bin/env bash
# Two "nodes" on one machine (issue 46): runs a multi-rank program at 4 ranks as 2 nodes of 2 ranks,
# so every node-local fast path (cross-memory attach, peer writes into shared pieces, the call
# board, shared-memory MPI) must give way to plain MPI between the nodes, as on a real cluster.
#
# Each node is a network namespace with its own hostname (a UTS namespace), joined to the other by
# a veth pair whose two addresses come from the loopback range 127.0.0.0/8 (route_localnet on);
# no other address is used. Open MPI's TCP transport runs between them; mpirun runs on node a and
# starts node b's daemon through a launcher agent (in place of ssh) that enters node b's
# namespaces. Everything the script makes is removed when it ends, however it ends.
#
# usage: two_nodes.sh MPIEXEC PROGRAM [ARGS...]   (exit 77, a skip, without root or namespaces)
set -u
mpiexec=$1
shift
program=("$@")
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "two_nodes: SKIPPED: needs root, ip (iproute2) and unshare to make network namespaces"
  exit 77
fi
id=$$
subnet="127.$((id % 200 + 20)).$((id / 200 % 250 + 1))"
a="dax_node_a_$id" b="dax_node_b_$id"
tmp=$(mktemp -d /tmp/dax_two_nodes.XXXXXX)
cleanup() {
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
if ! ip netns add "$a" 2>/dev/null; then
  echo "two_nodes: SKIPPED: this machine does not allow network namespaces (ip netns add failed)"
  exit 77
fi
ip netns add "$b" || exit 1
ip link add "va$id" type veth peer name "vb$id" || exit 1
ip link set "va$id" netns "$a" && ip link set "vb$id" netns "$b" || exit 1
for side in "a $a va$id $subnet.1" "b $b vb$id $subnet.2"; do
  set -- $side
  ip netns exec "$2" sysctl -qw net.ipv4.conf.all.route_localnet=1 "net.ipv4.conf.$3.route_localnet=1" || exit 1
  ip netns exec "$2" ip link set lo up || exit 1
  ip netns exec "$2" ip addr add "$4/24" dev "$3" || exit 1
  ip netns exec "$2" ip link set "$3" up || exit 1
done

# The launcher agent: Open MPI calls it as it would call ssh ("agent HOST COMMAND..."), the command
# a shell string. It runs the command on that node: in its network namespace, under its hostname.
cat > "$tmp/agent" <<AGENT
#!/bin/sh
host=\$1
shift
case "\$host" in
  $subnet.1) ns=$a; name=dax-node-a ;;
  $subnet.2) ns=$b; name=dax-node-b ;;
  *) echo "two_nodes agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name && \$*"
AGENT
chmod +x "$tmp/agent"
printf '%s slots=2\n%s slots=2\n' "$subnet.1" "$subnet.2" > "$tmp/hosts"

echo "two_nodes: node a (dax-node-a, $subnet.1) and node b (dax-node-b, $subnet.2), 2 ranks each"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$a" unshare --uts sh -c 'hostname dax-node-a && exec "$@"' sh \
  "$mpiexec" -n 4 --hostfile "$tmp/hosts" --mca plm_rsh_agent "$tmp/agent" \
  --mca oob_tcp_if_include "$subnet.0/24" --mca btl_tcp_if_include "$subnet.0/24" --mca btl tcp,vader,self --mca mpi_yield_when_idle 1 \
  "${program[@]}"
