#!/usr/bin/env bash
# The build context of Containerfile.ssh (the tiphys image with the OpenSSH client), made from
# this machine's openssh-client: `ssh`, the `/bin/sh` gix runs it through, every shared library
# the two load (as `ldd` resolves them, the dynamic loader included), and /etc/passwd, /etc/group
# and /etc/nsswitch.conf naming the image's user 65532 (ssh will not run for a user it cannot
# look up). Nothing is downloaded; a machine without openssh-client is told to install it.
#
#   bash tools/image-ssh-context.sh DIR        # DIR must not exist yet; DIR/root/ is the image's /
set -euo pipefail

dir=${1:-}
if [ -z "$dir" ] || [ "$#" -ne 1 ]; then
    echo "usage: $0 DIR  (a directory that does not exist yet)" >&2
    exit 2
fi
if [ -e "$dir" ]; then
    echo "$dir already exists: give a new directory, so that nothing stale is copied into the image" >&2
    exit 2
fi
ssh=$(command -v ssh || true)
if [ -z "$ssh" ]; then
    echo "no ssh on PATH: install the OpenSSH client (apt-get install openssh-client)" >&2
    exit 1
fi
for tool in ldd readlink install stat awk; do
    command -v "$tool" >/dev/null || { echo "$tool is needed and not on PATH" >&2; exit 1; }
done
root=$dir/root
mkdir -p "$root"

# A file at the path it is loaded from, with the content and mode of what that path resolves to
# (a symlink on the machine is a plain file in the image, so no link can point outside it; the
# dynamic loader keeps its execute bits, which the kernel asks for).
place() {
    local real
    real=$(readlink -f "$1")
    install -D -m "$(stat -c %a "$real")" "$real" "$root$1"
}

# Every library `ldd` names for a program: "name => /path (addr)" and the loader "/path (addr)".
libraries() {
    ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
}

place /usr/bin/ssh
[ "$ssh" = /usr/bin/ssh ] || place "$ssh"
place /bin/sh
for program in "$ssh" /bin/sh; do
    if ! ldd "$program" >/dev/null 2>&1; then
        continue # statically linked: nothing to load
    fi
    for lib in $(libraries "$program"); do
        [ -e "$root$lib" ] || place "$lib"
    done
done

mkdir -p "$root/etc"
echo "tiphys:x:65532:65532:tiphys:/var/lib/tiphys:/sbin/nologin" >"$root/etc/passwd"
echo "tiphys:x:65532:" >"$root/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
echo "$root: $(find "$root" -type f | wc -l) files"
