#!/bin/sh
# Rebuild bench/data/formats/docs from the Debian 12 (bookworm) packages and the real PDFs named in
# bench/data/formats/SOURCE.md, then check the sha256 sums recorded there (issue 32).
# Needs apt-get, dpkg, LibreOffice (soffice, headless), poppler-utils (pdftoppm), and a Python with
# python-pptx and Pillow (funnel's .venv has both: PYTHON=.venv/bin/python); downloads ~8 MB of .deb
# files into a temporary folder; installs nothing.
# LibreOffice output (.docx .odt .xlsx .ods .odp) carries a creation time and is NOT byte-stable:
# its sums are reported but not required to match; every other file must match.
#   sh bench/build_formats.sh [OUT]     (default: a temporary folder; the checked-in copies stay as they are)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)/docs}
py=${PYTHON:-python3}
case $py in /*) ;; */*) py=$(pwd)/$py ;; esac
realpdf="$here/data/realpdf/pdfs"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$work"
apt-get download debian-faq=11.1 apt-doc=2.6.2 maint-guide=1.2.53 distro-info-data=0.58+deb12u7 \
  tzdata=2026f-0+deb12u1 iso-codes=4.15.0-1 libpython3.11-testsuite=3.11.2-6+deb12u9
for deb in *.deb; do dpkg -x "$deb" x; done
d=x/usr/share/doc
faq=$d/debian/FAQ
mg=$d/maint-guide/html
mail=x/usr/lib/python3.11/test/test_email/data
mkdir stage

# HTML, unchanged (renamed)
cp "$d/apt-doc/guide.html/ch2.html" "$out/apt-guide-ch2.html"
cp "$faq/software.en.html" "$out/debian-faq-software.html"

# CSV, unchanged
cp x/usr/share/distro-info/debian.csv "$out/distro-info-debian.csv"
cp x/usr/share/distro-info/ubuntu.csv "$out/distro-info-ubuntu.csv"

# E-mail: CPython's email test messages, unchanged (renamed .eml); the .mbox is two of them, concatenated
# (each already starts with an mbox "From " line), with one blank line between them
cp "$mail/msg_02.txt" "$out/python-email-msg02-digest.eml"
cp "$mail/msg_07.txt" "$out/python-email-msg07-attachment.eml"
cp "$mail/msg_16.txt" "$out/python-email-msg16-bounce.eml"
{ cat "$mail/msg_25.txt"; echo; cat "$mail/msg_43.txt"; } > "$out/python-email-bounces.mbox"

# Word processor: LibreOffice conversions of Debian HTML pages (and the pages for the EPUBs, below)
s=stage/writer; mkdir -p $s/docx $s/odt $s/epub
cp "$faq/basic-defs.en.html" $s/docx/debian-faq-basic-defs.html
cp "$mg/upload.en.html" $s/docx/maint-guide-upload.html
cp "$faq/kernel.en.html" $s/odt/debian-faq-kernel.html
cp "$faq/contributing.en.html" $s/odt/debian-faq-contributing.html
cp "$faq/uptodate.en.html" $s/epub/debian-faq-uptodate.html
cp "$mg/checkit.en.html" $s/epub/maint-guide-checkit.html
lo() { soffice --headless --norestore "-env:UserInstallation=file://$work/lo-profile" "$@" >/dev/null; }
# (converted beside their sources, so that the pages' relative links stay relative: "support.en.html#...")
lo --infilter="HTML (StarWriter)" --convert-to docx:"MS Word 2007 XML" --outdir $s/docx $s/docx/*.html
lo --infilter="HTML (StarWriter)" --convert-to odt --outdir $s/odt $s/odt/*.html
mv $s/docx/*.docx $s/odt/*.odt "$out/"
# EPUB: LibreOffice's EPUB export writes every heading as a styled <p> (no <h1>-<h6>, one nav entry), which
# no real e-book does; so each EPUB is the page's own XHTML, unchanged, as the one chapter of an EPUB 3
# container (mimetype, container.xml, content.opf, nav.xhtml) written by Python's zipfile with fixed times:
# byte-stable
"$py" - "$out" $s/epub/*.html <<'PY'
import re, sys, zipfile
from pathlib import Path
out = Path(sys.argv[1])
for page in map(Path, sys.argv[2:]):
    xhtml = page.read_text(encoding="utf-8")
    title = re.sub(r"\s+", " ", re.search(r"<title>(.*?)</title>", xhtml, re.S).group(1)).strip()
    files = {
        "mimetype": "application/epub+zip",
        "META-INF/container.xml": '<?xml version="1.0" encoding="UTF-8"?>\n<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>\n',
        "OEBPS/content.opf": f'<?xml version="1.0" encoding="UTF-8"?>\n<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="id">funnel-bench-{page.stem}</dc:identifier><dc:title>{title}</dc:title><dc:language>en</dc:language><meta property="dcterms:modified">2026-12-04T00:00:00Z</meta></metadata><manifest><item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/><item id="chapter" href="chapter.xhtml" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="chapter"/></spine></package>\n',
        "OEBPS/nav.xhtml": f'<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>{title}</title></head><body><nav epub:type="toc"><ol><li><a href="chapter.xhtml">{title}</a></li></ol></nav></body></html>\n',
        "OEBPS/chapter.xhtml": xhtml,
    }
    with zipfile.ZipFile(out / (page.stem + ".epub"), "w") as z:
        for name, text in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED
            z.writestr(info, text.encode("utf-8"))
PY
# Spreadsheets: real tab-separated tables (tzdata's zone1970.tab without its '#' comment lines, under the
# column names its header comment gives; iso-codes' JSON lists as code/name columns) -> LibreOffice Calc
s=stage/calc; mkdir -p $s/xlsx $s/ods
{ printf 'codes\tcoordinates\tTZ\tcomments\n'; grep -v '^#' x/usr/share/zoneinfo/zone1970.tab; } > $s/xlsx/tzdata-zone1970.csv
"$py" - x/usr/share/iso-codes/json $s <<'PY'
import json, sys
src, s = sys.argv[1], sys.argv[2]
def tsv(name, key, cols, out):
    rows = json.load(open(f"{src}/{name}.json", encoding="utf-8"))[key]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join(r.get(c, "") for c in cols) + "\n")
tsv("iso_4217", "4217", ["alpha_3", "numeric", "name"], f"{s}/xlsx/iso-4217-currencies.csv")
tsv("iso_639-2", "639-2", ["alpha_3", "alpha_2", "bibliographic", "name"], f"{s}/ods/iso-639-2-languages.csv")
tsv("iso_15924", "15924", ["alpha_4", "numeric", "name"], f"{s}/ods/iso-15924-scripts.csv")
PY
lo --infilter="CSV:9,34,76,1,1/2/2/2/3/2/4/2" --convert-to xlsx:"Calc MS Excel 2007 XML" --outdir "$out" $s/xlsx/*.csv
lo --infilter="CSV:9,34,76,1,1/2/2/2/3/2/4/2" --convert-to ods --outdir "$out" $s/ods/*.csv

# Presentations: slides built from a document's outline with python-pptx (title = a section heading,
# bullets = the first sentences of its paragraphs, verbatim); two kept as .pptx, two converted to .odp
s=stage/slides; mkdir -p $s/pptx $s/odp
"$py" "$here/data/formats/outline_slides.py" "$faq/getting-debian.en.html" $s/pptx/debian-faq-getting-debian.pptx
"$py" "$here/data/formats/outline_slides.py" "$d/apt-doc/offline.html/ch2.html" $s/pptx/apt-offline-ch2.pptx
"$py" "$here/data/formats/outline_slides.py" "$faq/support.en.html" $s/odp/debian-faq-support.pptx
"$py" "$here/data/formats/outline_slides.py" "$faq/nextrelease.en.html" $s/odp/debian-faq-nextrelease.pptx
cp $s/pptx/*.pptx "$out/"
lo --convert-to odp --outdir "$out" $s/odp/*.pptx

# Scans: pages of bench/data/realpdf's PDFs rendered to images (no text layer anywhere)
pdftoppm -f 9 -l 9 -r 200 -gray -png "$realpdf/fhs-3.0.pdf" stage/fhs9 && mv stage/fhs9-*.png "$out/scan-fhs-3.0-p9.png"
pdftoppm -f 5 -l 5 -r 200 -gray -png "$realpdf/R-data.pdf" stage/rdata5 && mv stage/rdata5-*.png "$out/scan-R-data-p5.png"
pdftoppm -f 10 -l 10 -r 200 -mono -tiff -tiffcompression lzw "$realpdf/fhs-3.0.pdf" stage/fhs10 \
  && mv stage/fhs10-*.tif "$out/scan-fhs-3.0-p10.tiff"
pdftoppm -f 7 -l 8 -r 200 -gray -png "$realpdf/R-FAQ.pdf" stage/rfaq
"$py" - "$out/scan-R-FAQ-p7-8.pdf" stage/rfaq-*.png <<'PY'
import sys
from PIL import Image
out, pages = sys.argv[1], sorted(sys.argv[2:])
images = [Image.open(p).convert("L") for p in pages]
images[0].save(out, "PDF", resolution=200.0, save_all=True, append_images=images[1:])
PY

sed -n '/^```$/,/^```$/p' "$here/data/formats/SOURCE.md" | grep -v '```' > sums
stable=$(grep -v -E '\.(docx|odt|xlsx|ods|odp|pptx|pdf)$' sums)
echo "$stable" > sums.stable
(cd "$out" && sha256sum -c "$work/sums.stable")
echo "LibreOffice output (not byte-stable; checked-in sums in SOURCE.md):"
(cd "$out" && for f in *.docx *.odt *.xlsx *.ods *.odp *.pptx *.pdf; do sha256sum "$f"; done)
echo "rebuilt in $out"
