#!/usr/bin/env bash
# Builds the real k8s.io/apiextensions-apiserver (Kubernetes 1.36 code) and fetches etcd, from
# Debian sid's source packages, for the `apiserver` pytest tier (operator/tests/apiserver/).
#
# Why Debian: no kube-apiserver/envtest binaries can be downloaded on our machines, but Debian
# ships the Go sources of every Kubernetes library as golang-*-dev packages, plus the Go 1.27
# toolchain and etcd. We fetch them with a PRIVATE apt configuration (own sources list, lists,
# cache and an empty status file under the cache dir), built from the machine's Debian mirror;
# the system's apt state is never read for state nor written, and nothing is installed into /.
#
# Output (idempotent; a second run exits at once):
#   $CACHE/bin/apiextensions-apiserver   $CACHE/bin/etcd   $CACHE/build-info.txt
# where CACHE = $RLHF_APISERVER_CACHE or ~/.cache/rlhf-operator/apiserver.
#
# Usage: scripts/build-apiserver.sh [--force] [--prune]
#   --force  rebuild even when the binaries are cached
#   --prune  after a successful build, delete the unpacked sources, .debs and Go build cache
#            (~4 GB), keeping only the two binaries (~130 MB)
# Env: RLHF_DEBIAN_MIRROR=http://host/debian overrides the mirror read from /etc/apt.
set -euo pipefail

CACHE="${RLHF_APISERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rlhf-operator/apiserver}"
SUITE=sid
ROOTS=(golang-k8s-apiextensions-apiserver-dev golang-go etcd-server)
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

FORCE=0
PRUNE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --prune) PRUNE=1 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build-apiserver: unknown argument '$arg' (allowed: --force, --prune)" >&2; exit 2 ;;
  esac
done

die() {
  echo "build-apiserver: FAILED: $*" >&2
  exit 1
}

BIN="$CACHE/bin"
if [[ $FORCE == 0 && -x "$BIN/apiextensions-apiserver" && -x "$BIN/etcd" ]]; then
  echo "build-apiserver: cached: $BIN/apiextensions-apiserver, $BIN/etcd"
  exit 0
fi

for tool in apt-get apt-cache apt-config dpkg-deb dpkg flock; do
  command -v "$tool" >/dev/null || die "'$tool' not found; this script needs a Debian-based machine"
done
[[ -r $KEYRING ]] || die "$KEYRING missing (install debian-archive-keyring); cannot verify sid"

mkdir -p "$CACHE"
# Serialise concurrent runs (pytest fixtures, CI) on the same cache.
exec 9>"$CACHE/.lock"
flock 9
if [[ $FORCE == 0 && -x "$BIN/apiextensions-apiserver" && -x "$BIN/etcd" ]]; then
  echo "build-apiserver: cached (built by a concurrent run): $BIN"
  exit 0
fi

T_START=$(date +%s)

# --- 1. The machine's Debian mirror -------------------------------------------------------------
# Reads one-line (*.list) and deb822 (*.sources) entries; keeps the first URI whose path ends in
# /debian (the main archive, not debian-security or third-party repositories).
find_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $f ]] || continue
    sed -E 's/#.*//; s/\[[^]]*\]//' "$f" | awk '$1 == "deb" {print $2}'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -r $f ]] || continue
    # Skip stanzas marked Enabled: no.
    awk 'BEGIN{RS=""} !/(^|\n)[Ee]nabled:[ \t]*[Nn]o/ {print}' "$f" |
      sed -nE 's/^URIs:[ \t]*//Ip' | tr ' \t' '\n\n'
  done
}
MIRROR="${RLHF_DEBIAN_MIRROR:-}"
if [[ -z $MIRROR ]]; then
  MIRROR=$(find_mirror | grep -E '^(https?|ftp)://[^ ]*/debian/?$' | head -n1 || true)
fi
[[ -n $MIRROR ]] || die "no Debian mirror (a URI ending in /debian) found in /etc/apt/sources.list*; set RLHF_DEBIAN_MIRROR to a Debian mirror URL ending in /debian"
MIRROR="${MIRROR%/}"
ARCH=$(dpkg --print-architecture)
echo "build-apiserver: mirror $MIRROR, suite $SUITE, arch $ARCH, cache $CACHE"

# --- 2. Private apt configuration ---------------------------------------------------------------
APTDIR="$CACHE/apt"
mkdir -p "$APTDIR"/{lists/partial,cache/archives/partial,sources.list.d,preferences.d,conf.d,log}
: >"$APTDIR/status"
echo "deb [signed-by=$KEYRING] $MIRROR $SUITE main" >"$APTDIR/sources.list"
{
  # APT_CONFIG is read before anything else; pointing Dir::Etc::Parts/Main away from /etc keeps
  # the system's hooks (e.g. appstream's Update::Post-Invoke) from running on our private update.
  cat <<EOF
Dir::Etc::Main "/dev/null";
Dir::Etc::Parts "$APTDIR/conf.d";
Dir::Etc::SourceList "$APTDIR/sources.list";
Dir::Etc::SourceParts "$APTDIR/sources.list.d";
Dir::Etc::Preferences "$APTDIR/preferences";
Dir::Etc::PreferencesParts "$APTDIR/preferences.d";
Dir::State::Lists "$APTDIR/lists";
Dir::State::status "$APTDIR/status";
Dir::State::extended_states "$APTDIR/extended_states";
Dir::Cache "$APTDIR/cache";
Dir::Cache::archives "$APTDIR/cache/archives";
Dir::Log "$APTDIR/log";
APT::Architecture "$ARCH";
APT::Architectures { "$ARCH"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
Acquire::Retries "3";
EOF
  # Keep the machine's network settings (proxies, date checks), nothing else.
  apt-config dump 2>/dev/null |
    grep -E '^Acquire::((https?|ftp)::|Check-Valid-Until |Check-Date |ForceIPv[46] )' || true
} >"$APTDIR/apt.conf"
export APT_CONFIG="$APTDIR/apt.conf"
[[ $(id -u) == 0 ]] || sed -i '/^APT::Sandbox::User/d' "$APT_CONFIG"

T0=$(date +%s)
# apt-get update exits 0 on fetch failures by default; treat any as an error.
apt-get -q -o APT::Update::Error-Mode=any update >"$APTDIR/log/update.log" 2>&1 &&
  ! grep -qE '^(W|E): (Failed to fetch|Some index files failed)' "$APTDIR/log/update.log" ||
  die "private 'apt-get update' of $MIRROR $SUITE failed (see $APTDIR/log/update.log):
$(tail -n 5 "$APTDIR/log/update.log")"
for pkg in "${ROOTS[@]}"; do
  apt-cache show --no-all-versions "$pkg" >/dev/null 2>&1 ||
    die "package '$pkg' is not in Debian $SUITE any more; the apiserver tier cannot be built"
done

# --- 3. Dependency closure ----------------------------------------------------------------------
# Only Go sources (golang-*), the toolchain and etcd-server are needed: we build in GOPATH mode
# from /usr/share/gocode and take etcd's binary, so libc & co. stay the host's.
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${ROOTS[@]}" |
  grep -v '^[ <]' | grep -E '^(golang-|etcd-server$)' | sort -u >"$APTDIR/packages.txt"
NPKG=$(wc -l <"$APTDIR/packages.txt")
(( NPKG > 100 )) || die "dependency closure has only $NPKG packages; apt-cache output changed?"

DEBS="$CACHE/debs"
mkdir -p "$DEBS"
# Drop .debs of versions sid no longer ships, then fetch what is missing (apt verifies hashes
# and skips files that are already there).
apt-get download --print-uris $(cat "$APTDIR/packages.txt") | awk '{print $2}' >"$APTDIR/debs.txt"
for f in "$DEBS"/*.deb; do
  [[ -e $f ]] || continue
  grep -qxF "$(basename "$f")" "$APTDIR/debs.txt" || rm -f "$f"
done
(cd "$DEBS" && apt-get -q download $(cat "$APTDIR/packages.txt") >"$APTDIR/log/download.log" 2>&1) ||
  die "downloading $NPKG packages failed (see $APTDIR/log/download.log):
$(tail -n 5 "$APTDIR/log/download.log")"
T_DOWNLOAD=$(($(date +%s) - T0))
DL_MB=$(du -sm "$DEBS" | cut -f1)
echo "build-apiserver: $NPKG packages, ${DL_MB} MB, fetched in ${T_DOWNLOAD}s"

# --- 4. Unpack ----------------------------------------------------------------------------------
T0=$(date +%s)
ROOT="$CACHE/root"
# The stamp lists the .debs a complete unpack came from; same list, no need to unpack again.
if ! cmp -s "$APTDIR/debs.txt" "$ROOT/.unpacked-debs.txt"; then
  rm -rf "$ROOT"
  mkdir -p "$ROOT"
  for f in "$DEBS"/*.deb; do
    dpkg-deb -x "$f" "$ROOT" || die "dpkg-deb -x $f failed"
  done
  # Absolute symlinks inside the packages point at /usr/...; re-point them into $ROOT.
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    if [[ $target == /* ]]; then ln -sfn "$ROOT$target" "$link"; fi
  done < <(find "$ROOT" -type l -print0)
  cp "$APTDIR/debs.txt" "$ROOT/.unpacked-debs.txt"
fi
T_UNPACK=$(($(date +%s) - T0))
echo "build-apiserver: unpacked in ${T_UNPACK}s"

# --- 5. Build -----------------------------------------------------------------------------------
GOROOT_DIR=$(find "$ROOT/usr/lib" -maxdepth 1 -type d -name 'go-*' | sort -V | tail -n1)
[[ -x $GOROOT_DIR/bin/go ]] || die "no Go toolchain found under $ROOT/usr/lib/go-*"
GOPATH_DIR="$ROOT/usr/share/gocode"
[[ -d $GOPATH_DIR/src/k8s.io/apiextensions-apiserver ]] ||
  die "$GOPATH_DIR/src/k8s.io/apiextensions-apiserver missing after unpacking"
mkdir -p "$BIN" "$CACHE/gocache" "$CACHE/gotmp"

T0=$(date +%s)
echo "build-apiserver: compiling k8s.io/apiextensions-apiserver with $("$GOROOT_DIR/bin/go" version) (~6 min on 2 cores)"
# GOPATH mode: every import resolves to Debian's packaged sources, no module download.
# CGO off: nothing here needs C, and it removes the need for gcc on the machine.
env -u GOFLAGS -u GOBIN \
  GOROOT="$GOROOT_DIR" GOPATH="$GOPATH_DIR" GO111MODULE=off GOPROXY=off GOTOOLCHAIN=local \
  GOENV=off GOTELEMETRY=off GOCACHE="$CACHE/gocache" GOTMPDIR="$CACHE/gotmp" CGO_ENABLED=0 \
  "$GOROOT_DIR/bin/go" build -o "$BIN/.apiextensions-apiserver.tmp" k8s.io/apiextensions-apiserver \
  >"$CACHE/build.log" 2>&1 ||
  die "go build failed (see $CACHE/build.log):
$(tail -n 20 "$CACHE/build.log")"
T_COMPILE=$(($(date +%s) - T0))

cp "$ROOT/usr/bin/etcd" "$BIN/.etcd.tmp" || die "etcd-server did not ship /usr/bin/etcd"
"$BIN/.etcd.tmp" --version >/dev/null 2>&1 ||
  die "the etcd binary from $SUITE does not run on this machine: $("$BIN/.etcd.tmp" --version 2>&1 | tail -n 2)"
"$BIN/.apiextensions-apiserver.tmp" --help >/dev/null 2>&1 ||
  die "the built apiextensions-apiserver does not run: $("$BIN/.apiextensions-apiserver.tmp" --help 2>&1 | tail -n 2)"
mv "$BIN/.etcd.tmp" "$BIN/etcd"
mv "$BIN/.apiextensions-apiserver.tmp" "$BIN/apiextensions-apiserver"

T_TOTAL=$(($(date +%s) - T_START))
version_of() { grep -E "^$1_" "$APTDIR/debs.txt" | head -n1 | sed -E 's/^[^_]+_([^_]+)_.*/\1/; s/%3a/:/'; }
{
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nproc) cores"
  echo "mirror: $MIRROR $SUITE"
  for pkg in "${ROOTS[@]}"; do echo "$pkg: $(version_of "$pkg")"; done
  echo "go: $("$GOROOT_DIR/bin/go" version)"
  echo "packages: $NPKG (${DL_MB} MB of .debs)"
  echo "download_s: $T_DOWNLOAD"
  echo "unpack_s: $T_UNPACK"
  echo "compile_s: $T_COMPILE"
  echo "total_s: $T_TOTAL"
  echo "unpacked_mb: $(du -sm "$ROOT" | cut -f1)"
  echo "gocache_mb: $(du -sm "$CACHE/gocache" | cut -f1)"
  echo "apiserver_mb: $(du -sm "$BIN/apiextensions-apiserver" | cut -f1)"
} >"$CACHE/build-info.txt"

if [[ $PRUNE == 1 ]]; then
  rm -rf "$ROOT" "$DEBS" "$CACHE/gocache" "$CACHE/gotmp"
  echo "build-apiserver: pruned sources, .debs and Go cache"
fi
cat "$CACHE/build-info.txt"
echo "build-apiserver: done in ${T_TOTAL}s (compile ${T_COMPILE}s): $BIN/apiextensions-apiserver"
