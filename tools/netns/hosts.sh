#!/usr/bin/env bash
# Test hosts on this machine (issue 20): N network namespaces fsqh0..fsqh<N-1>, each with loopback
# up and one veth interface fsqv<I> at 10.213.77.<I+1>/24, all joined by a bridge that lives in a
# namespace of its own (fsqhhub): nothing is added to, or changed in, the machine's own namespace.
# Each host's /etc/netns/fsqh<I>/hosts (bind-mounted over /etc/hosts by `ip netns exec`) maps every
# test host's name to its veth address. Needs root.
#
#   tools/netns/hosts.sh up 2                      # fsqh0 (10.213.77.1) and fsqh1 (10.213.77.2)
#   tools/netns/hosts.sh exec fsqh1 CMD [ARG...]   # CMD on host fsqh1, with hostname fsqh1
#   tools/netns/hosts.sh down                      # kills what runs in them, removes everything
#
# `up` starts from a clean state (it runs `down` first), so both are idempotent. Tests call `up`
# with `down` in a trap. FSQ_NETNS_SUBNET=A.B.C picks another /24; `up` refuses a subnet that an
# address or a route of this machine already covers. FSQ_NETNS_PREFIX=NAME names the hosts NAME0,
# NAME1, ... and their hub NAMEhub instead (a second, independent set: `down` removes only its own).
set -euo pipefail

prefix=${FSQ_NETNS_PREFIX:-fsqh}
hub=${prefix}hub
subnet=${FSQ_NETNS_SUBNET:-10.213.77}
max_hosts=200

usage() {
  echo "usage: tools/netns/hosts.sh up N | down | exec HOST CMD [ARG...]" >&2
  exit 2
}

fail() {
  echo "hosts.sh: $*" >&2
  exit "${code:-1}"
}

[[ "$prefix" =~ ^[a-z][a-z0-9]{0,7}$ ]] || {
  echo "hosts.sh: FSQ_NETNS_PREFIX must be a lower-case name of 1-8 letters and digits, not \`$prefix'" >&2
  exit 2
}

need_root() {
  [ "$(id -u)" -eq 0 ] || code=1 fail "needs root (network namespaces, veth pairs and /etc/netns); run it as root"
  for tool in ip unshare; do
    command -v "$tool" >/dev/null 2>&1 || code=1 fail "\`$tool' is missing; tools/setup.sh installs iproute2 and util-linux"
  done
}

# Our namespaces, whatever N they were made with.
our_namespaces() {
  ip netns list | awk '{print $1}' | grep -E "^(${prefix}[0-9]+|${hub})\$" || true
}

# a.b.c.d -> integer
ip_to_int() {
  local IFS=.
  # shellcheck disable=SC2086
  set -- $1
  echo $((($1 << 24) + ($2 << 16) + ($3 << 8) + $4))
}

# Fails when an IPv4 address or route of this machine's own namespace overlaps $subnet.0/24.
check_subnet_free() {
  [[ "$subnet" =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] && ((BASH_REMATCH[1] < 256 && BASH_REMATCH[2] < 256 &&
    BASH_REMATCH[3] < 256)) || code=2 fail "FSQ_NETNS_SUBNET must be three numbers A.B.C (a /24), not \`$subnet'"
  local ours
  ours=$(ip_to_int "$subnet.0")
  local entry net len theirs mask
  while read -r entry; do
    [ -n "$entry" ] || continue
    net=${entry%/*}
    len=32
    [ "$entry" != "$net" ] && len=${entry#*/}
    [[ "$net" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
    ((len < 24)) || len=24  # compare on the shorter of the two prefixes
    mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
    ((len == 0)) && mask=0
    theirs=$(ip_to_int "$net")
    if ((len > 0 && (ours & mask) == (theirs & mask))); then
      code=1 fail "the test subnet $subnet.0/24 overlaps $entry, used on this machine; pick another with FSQ_NETNS_SUBNET=A.B.C"
    fi
  done < <(
    ip -4 -o addr show | awk '{print $4}'
    # each route's destination (or, for the default route, its gateway)
    ip -4 route show table all | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+(\/[0-9]+)?$/) {print $i; break}}'
  )
}

# True when host $1 gets an answer from $2 (TCP port 9, where nothing listens: refused = reached).
reaches() {
  local out
  out=$(ip netns exec "$1" timeout 1 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ "$out" == *"refused"* ]]
}

down() {
  local ns
  for ns in $(our_namespaces); do
    # Every process of the host first: a namespace with processes in it outlives `ip netns del`.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
      sleep 0.1
    done
    ip netns del "$ns" 2>/dev/null || true  # its veth ends and the bridge go with it
  done
  for ns in /etc/netns/${prefix}[0-9]*; do
    [ -d "$ns" ] || continue
    rm -rf -- "$ns"
  done
  rmdir /etc/netns 2>/dev/null || true  # only when nothing else is in it
}

up() {
  local n=$1
  [[ "$n" =~ ^[0-9]+$ ]] && ((n >= 1 && n <= max_hosts)) || code=2 fail "N must be a number of hosts in 1-$max_hosts, not \`$n'"
  check_subnet_free
  down
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add fsqbr type bridge
  ip -n "$hub" link set fsqbr up
  local i ns hosts
  hosts=$(printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n')
  for ((i = 0; i < n; i++)); do
    hosts+=$(printf '\n%s.%d\t%s%d' "$subnet" $((i + 1)) "$prefix" "$i")
  done
  for ((i = 0; i < n; i++)); do
    ns=$prefix$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Both ends are made inside their namespaces: the machine's own namespace never sees them.
    ip link add "fsqv$i" netns "$ns" type veth peer name "fsqp$i" netns "$hub"
    ip -n "$hub" link set "fsqp$i" master fsqbr
    ip -n "$hub" link set "fsqp$i" up
    ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev "fsqv$i"
    ip -n "$ns" link set "fsqv$i" up
    mkdir -p "/etc/netns/$ns"
    printf '%s\n' "$hosts" >"/etc/netns/$ns/hosts"
  done
  # Every host reaches every other: a TCP connection to a closed port is refused at once when the
  # link works (and times out when it does not). Bridge ports forward within moments.
  local j ok
  for _ in $(seq 1 50); do
    ok=1
    for ((i = 0; i < n && ok; i++)); do
      for ((j = 0; j < n; j++)); do
        ((i == j)) && continue
        reaches "$prefix$i" "$subnet.$((j + 1))" || { ok=0; break; }
      done
    done
    ((ok)) && break
    sleep 0.1
  done
  ((ok)) || code=1 fail "the test hosts cannot reach each other over the bridge"
  for ((i = 0; i < n; i++)); do
    echo "hosts.sh: $prefix$i fsqv$i $subnet.$((i + 1))/24"
  done
}

# CMD on HOST with its own hostname (ip netns exec keeps the machine's: see MULTINODE.md).
exec_on() {
  local ns=$1
  shift
  [ $# -gt 0 ] || usage
  [[ "$ns" =~ ^${prefix}[0-9]+$ ]] && ip netns list | awk '{print $1}' | grep -qx "$ns" ||
    code=2 fail "no test host \`$ns'; make them with: tools/netns/hosts.sh up N"
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

[ $# -ge 1 ] || usage
case "$1" in
  up) [ $# -eq 2 ] || usage; need_root; up "$2" ;;
  down) [ $# -le 2 ] || usage; need_root; down ;;
  exec) [ $# -ge 3 ] || usage; need_root; shift; exec_on "$@" ;;
  *) usage ;;
esac
