#!/usr/bin/env bash
# On the lent machine: what bench/gpu/carry.sh packed, into /opt/forensics-carry; prints
# what the carried binaries still miss there. Source it: it exports PYTHONPATH.
set -uo pipefail
dst=/opt/forensics-carry
mkdir -p "$dst/py" "$dst/bin"
# each part where it travelled: with lnav the two exceed one call's 64 MiB, so they may
# come in two calls to the same warm machine (what the first unpacked stays in /opt)
for part in py bin; do
  [ -f "bench/out/dev/$part.tar.xz" ] && xz -dc "bench/out/dev/$part.tar.xz" | tar -C "$dst/$part" -xf -
done
# wrappers: the carried libraries for the carried binaries only, not for python
# in /usr/bin: the generator runs journalctl with a bare environment (no PATH)
for b in lnav journalctl; do
  [ -x "/usr/bin/$b" ] && continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/bin/lib exec %s/bin/%s "$@"\n' "$dst" "$dst" "$b" >"/usr/bin/$b"
  chmod +x "/usr/bin/$b"
done
mkdir -p /lib/systemd
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/bin/lib exec %s/bin/systemd-journal-remote "$@"\n' "$dst" "$dst" \
  >/lib/systemd/systemd-journal-remote
chmod +x /lib/systemd/systemd-journal-remote
[ -x /usr/bin/time ] || cp "$dst/bin/time" /usr/bin/time  # GNU time: the bench's peak RSS
# forensics itself, editable as here (its package-dir mapping needs the installed finder)
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | grep -v WARNING
for b in lnav journalctl systemd-journal-remote; do
  LD_LIBRARY_PATH=$dst/bin/lib ldd "$dst/bin/$b" | grep 'not found' | sed "s/^/$b: /"
done
export PYTHONPATH="$dst/py${PYTHONPATH:+:$PYTHONPATH}"
