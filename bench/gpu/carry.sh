#!/usr/bin/env bash
# What the lent GPU machine lacks for bench/cores.py, packed to travel with a `run` call
# (carry bench/out/dev; 64 MiB a call): its image has Python 3.12 with pyarrow, numpy,
# typer, rich and scipy, but not polars, DuckDB, orjson or zstandard, and no lnav or
# systemd tools. The wheels are this machine's pinned versions, stripped (polars' runtime
# ships its symbols: 177 -> 138 MB) and xz-packed; the binaries are Debian's, with the
# libraries they link that are not glibc's. On the machine: bench/gpu/unpack.sh.
# `--without-lnav`: the journal tools alone (lnav's ICU data is 31 MB of the 64 a call
# may carry; the storage benchmarks need no lnav).
set -euo pipefail
lnav=bin/lnav
[ "${1:-}" = "--without-lnav" ] && lnav=""
out=bench/out/dev
rm -rf "$out" /tmp/forensics-carry && mkdir -p "$out" /tmp/forensics-carry/py /tmp/forensics-carry/bin/lib
cd /tmp/forensics-carry
ver() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
pip download -q --only-binary=:all: --no-deps --python-version 3.12 -d whl \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  "polars==$(ver polars)" "polars-runtime-32==$(ver polars-runtime-32)" "duckdb==$(ver duckdb)" \
  "orjson==$(ver orjson)" "zstandard==$(ver zstandard)"
for w in whl/*.whl; do unzip -q -o "$w" -d py; done
find py -name '*.so' -exec strip --strip-unneeded {} +
cp ${lnav:+/usr/bin/lnav} /usr/bin/journalctl /lib/systemd/systemd-journal-remote /usr/bin/time bin/
cp /usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-*.so bin/lib/
for b in $lnav bin/journalctl bin/systemd-journal-remote bin/lib/libsystemd-shared-*.so; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
  xargs -I{} cp -L {} bin/lib/
cd - >/dev/null
tar -C /tmp/forensics-carry/py -cf - . | xz -T0 -9e >"$out/py.tar.xz"
tar -C /tmp/forensics-carry/bin -cf - . | xz -T0 -9e >"$out/bin.tar.xz"
ls -la "$out"
