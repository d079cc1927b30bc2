# flowerbox's inspector: runs `lsof` for the shell of a read-only agent (judge, coordinator).
#
# That shell holds no capability to follow another process's /proc links (root, cwd, fd/N), so
# it can neither read nor write through them. This process can read them (CAP_SYS_PTRACE and
# CAP_DAC_READ_SEARCH, under a uid of its own); it runs nothing but the real lsof with the
# shell's arguments and writes the answer only into its own directory, which the shell cannot
# write. See runner/sandbox/docker/readonly.rs.
#
# Request: one line on the FIFO `req`: `ID _DATA`, ID matching [0-9]{8,40}, DATA the base64 of
# the working directory and the arguments, each ended by a NUL byte. Answer: ID.out and ID.err,
# then ID.rc (the exit code; the asker waits for it to be non-empty).
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

answer() {
  local id=$1 args=()
  mapfile -d '' -t args < <(printf %s "${2#_}" | base64 -d 2>/dev/null)
  cd -- "${args[0]:-/}" 2>/dev/null || cd /
  timeout -s KILL 120 "$lsof" "${args[@]:1}" >"$dir/$id.out" 2>"$dir/$id.err" </dev/null
  echo $? >"$dir/$id.rc"
}

n=0
while read -r -u 3 id data rest; do
  [[ $id =~ ^[0-9]{8,40}$ && -z $rest ]] || continue
  if [ -e "$id.rc" ] || [ -e "$id.out" ]; then continue; fi
  n=$((n + 1))
  if [ $((n % 32)) -eq 0 ]; then
    find "$dir" -maxdepth 1 -type f -name '[0-9]*.*' -mmin +5 -delete 2>/dev/null
  fi
  answer "$id" "$data" &
done
fail "lost $dir/req"
