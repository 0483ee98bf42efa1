#!/bin/sh
# Rebuild bench/data/realpdf/pdfs from the Debian packages named in bench/data/realpdf/SOURCE.md and check
# the sha256 sums recorded there. Needs apt-get and dpkg (Debian/Ubuntu); downloads ~30 MB of .deb files
# into a temporary folder; installs nothing.
#   sh bench/build_realpdf.sh [OUT]     (default: a temporary folder; the checked-in copies stay as they are)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)/pdfs}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$work"
apt-get download libtasn1-doc=4.19.0-2+deb12u1 shared-mime-info=2.2-1 libidn2-doc=2.3.3-1 \
  r-doc-pdf=4.2.2.20221110-2 glpk-doc=5.0-1 graphviz-doc=2.42.2-7+deb12u1 debian-policy=4.6.2.0 \
  debian-refcard=12.0 asymptote-doc=2.85+ds-1 octave-doc=7.3.0-2
for deb in *.deb; do dpkg -x "$deb" x; done
d=x/usr/share/doc
cp "$d/libtasn1-doc/libtasn1.pdf" "$d/shared-mime-info/shared-mime-info-spec.pdf" "$d/libidn2-doc/libidn2.pdf" \
   x/usr/share/R/doc/manual/R-data.pdf x/usr/share/R/doc/manual/R-FAQ.pdf "$d/glpk-doc/gmpl.pdf" \
   "$d/asymptote/asyRefCard.pdf" "$out/"
cp "$d/octave/refcard-a4.pdf" "$out/octave-refcard-a4.pdf"
gunzip -c "$d/graphviz/pdf/dotguide.pdf.gz" > "$out/dotguide.pdf"
gunzip -c "$d/debian-policy/fhs/fhs-3.0.pdf.gz" > "$out/fhs-3.0.pdf"
gunzip -c "$d/debian-refcard/refcard-en-a4.pdf.gz" > "$out/debian-refcard-en-a4.pdf"
sed -n '/^```$/,/^```$/p' "$here/data/realpdf/SOURCE.md" | grep -v '```' > sums
(cd "$out" && sha256sum -c "$work/sums")
echo "rebuilt in $out"
