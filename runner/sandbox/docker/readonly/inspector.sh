# flowerbox's inspector: runs `lsof` for the shell of a read-only agent (judge, coordinator).
#
# That shell holds no capability to follow another process's /proc links (root, cwd, fd/N), so
# it can neither read nor write through them. This process can read them (CAP_SYS_PTRACE and
# CAP_DAC_READ_SEARCH, under a uid of its own); it runs nothing but the real lsof with the
# shell's arguments and writes the answer only into its own directory, which the shell cannot
# write. See runner/sandbox/docker/readonly.rs.
#
# Request: one line on the FIFO `req`: `ID _CWD _ARG...`, ID matching [0-9]{8,40}, every other
# field `_` followed by the base64 of the value. Answer: ID.out, ID.err, then ID.rc (the exit
# code, renamed into place last).
# $1: the real lsof.
set -f
umask 022
lsof=$1
dir=/run/flowerbox-inspect
# The container lives as long as this process: on a failure, keep it up without an inspector.
fail() {
  echo "flowerbox-inspector: $1" >&2
  exec sleep infinity
}
cd "$dir" || fail "no $dir"
rm -f req
mkfifo -m 0622 req || fail "cannot make $dir/req"
exec 3<>req || fail "cannot open $dir/req"
trap 'exit 0' TERM INT HUP
echo $$ >pid.new && mv -f pid.new pid

# Sets REPLY to the value of one `_BASE64` field (trailing newlines kept).
decode() {
  local v
  v=$(printf %s "${1#_}" | base64 -d 2>/dev/null; printf x)
  REPLY=${v%x}
}

answer() {
  local id=$1 a
  shift
  decode "$1"
  shift
  cd -- "$REPLY" 2>/dev/null || cd /
  local args=()
  for a in "$@"; do
    decode "$a"
    args+=("$REPLY")
  done
  timeout -s KILL 120 "$lsof" "${args[@]}" >"$dir/$id.out" 2>"$dir/$id.err" </dev/null
  echo $? >"$dir/$id.new"
  mv -f "$dir/$id.new" "$dir/$id.rc"
}

while read -r -u 3 id fields; do
  [[ $id =~ ^[0-9]{8,40}$ ]] || continue
  if [ -e "$id.rc" ] || [ -e "$id.out" ]; then continue; fi
  find "$dir" -maxdepth 1 -type f -name '[0-9]*.*' -mmin +5 -delete 2>/dev/null
  # Fields are `_` + base64: no blanks inside, and globbing is off.
  # shellcheck disable=SC2086
  answer "$id" $fields &
done
fail "lost $dir/req"
