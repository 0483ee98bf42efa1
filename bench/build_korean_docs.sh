#!/bin/sh
# Rebuild bench/data/korean-docs/docs from the Debian 12 (bookworm) packages named in
# bench/data/korean-docs/SOURCE.md and check the sha256 sums recorded there. Needs apt-get, dpkg, gzip and
# python3 (standard library only); downloads ~80 MB of .deb files into a temporary folder; installs nothing.
# nabi is an arch-specific package (1.0.0-4+b1 is the amd64 build); its README.Debian.ko is the same on every arch.
#   sh bench/build_korean_docs.sh [OUT]     (default: a temporary folder; the checked-in copies stay as they are)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$(mktemp -d)/docs}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
cd "$work"
apt-get download installation-guide-amd64=20230508+deb12u1 texlive-lang-korean=2022.20230122-1 \
  debian-faq-ko=11.1 gnome-user-docs=43.0-2 hunspell-ko=0.7.92-1 fonts-baekmuk=2.2-13 nabi=1.0.0-4+b1
for deb in *.deb; do dpkg -x "$deb" x; done
d=x/usr/share/doc
t=$d/texlive-doc/latex
# PDFs, unchanged (the installation guide gunzipped)
gunzip -c "$d/installation-guide-amd64/ko/install.ko.pdf.gz" > "$out/debian-install-guide-ko.pdf"
cp "$t/lshort-korean/lshort-ko.pdf" "$t/cjk-ko/cjk-ko-doc.pdf" "$t/kotex-oblivoir/oblivoir-simpledoc.pdf" "$out/"
# plain text and Markdown, unchanged (gunzipped where shipped gzipped; renamed)
gunzip -c "$d/debian/FAQ/debian-faq.ko.txt.gz" > "$out/debian-faq-ko.txt"
gunzip -c "$d/hunspell-ko/README.md.gz" > "$out/hunspell-ko-README.md"
cp "$d/nabi/README.Debian.ko" "$out/nabi-README.Debian.ko.txt"
cp "$d/fonts-baekmuk/COPYRIGHT.ko.txt" "$out/baekmuk-COPYRIGHT.ko.txt"
# GNOME help (Mallard .page, Korean) -> Markdown: the pages of one topic, in C-locale name order, one file
cat > mal2md.py <<'PY'
# Mallard (.page) -> Markdown, Python stdlib only.  python3 mal2md.py "TITLE" PAGE... > out.md
# Pages are written one after another, each after an HTML comment naming its file; <info> and <media> are dropped.
import re, sys, xml.etree.ElementTree as ET
def tag(e): return e.tag.split('}')[-1] if isinstance(e.tag, str) else ''
def inline(e):
    parts = [e.text or '']
    for c in e:
        if tag(c) not in ('info', 'media'):
            if tag(c) in ('keyseq', 'guiseq'):
                s = ('+' if tag(c) == 'keyseq' else ' ▸ ').join(inline(k) for k in c)
                if tag(c) == 'guiseq': s = '*' + s.replace('*', '') + '*'
            else: s = inline(c)
            if tag(c) in ('cmd', 'code', 'sys', 'file', 'input', 'output'): s = '`' + s + '`'
            elif tag(c) == 'gui': s = '*' + s + '*'
            parts.append(s)
        parts.append(c.tail or '')
    return re.sub(r'\s+', ' ', ''.join(parts)).strip()
def flat(e, depth):
    sub = []; block(e, depth, sub)
    return ' '.join(s for s in sub if s)
def block(e, depth, out):
    for c in e:
        t = tag(c)
        if t in ('info', 'media', 'comment', ''): continue
        if t == 'title': out += ['#' * min(depth, 6) + ' ' + inline(c), '']
        elif t in ('p', 'desc'): out += [inline(c), '']
        elif t in ('section', 'links'): block(c, depth + 1, out)
        elif t in ('list', 'steps', 'tree'):
            n = 0
            for it in c:
                if tag(it) == 'title': out += [inline(it), '']
                elif tag(it) == 'item':
                    n += 1
                    out.append(('%d. ' % n if t == 'steps' else '- ') + (flat(it, depth) or inline(it)))
            out.append('')
        elif t == 'terms':
            for it in c:
                if tag(it) != 'item': continue
                head = ' / '.join(inline(x) for x in it if tag(x) == 'title')
                body = ' '.join(flat([x], depth) if tag(x) != 'p' else inline(x) for x in it if tag(x) != 'title')
                out.append('- **' + head + '**: ' + body.strip())
            out.append('')
        elif t in ('note', 'example', 'quote', 'synopsis', 'figure'):
            sub = []; block(c, depth + 1, sub)
            while sub and not sub[-1]: sub.pop()
            while sub and not sub[0]: sub.pop(0)
            out += [('> ' + s) if s else '>' for s in sub] + ['']
        elif t == 'table':
            for tr in c.iter('{http://projectmallard.org/1.0/}tr'):
                out.append('| ' + ' | '.join(inline(td) for td in tr) + ' |')
            out.append('')
        elif t in ('screen', 'code'): out += ['```', ''.join(c.itertext()).strip('\n'), '```', '']
        else: block(c, depth, out)
out = ['# ' + sys.argv[1], '']
for path in sys.argv[2:]:
    out += ['<!-- ' + path.split('/')[-1] + ' -->', '']
    block(ET.parse(path).getroot(), 2, out)
print(re.sub(r'\n{3,}', '\n\n', '\n'.join(out)).strip())
PY
h=x/usr/share/help/ko/gnome-help
conv() { # conv OUTNAME "TITLE" PREFIX
  python3 mal2md.py "$2" $(cd "$h" && LC_ALL=C ls -1 "$3"*.page | sed "s|^|$h/|") > "$out/$1"
}
conv gnome-help-power-ko.md "그놈 도움말: 전원과 배터리" power
conv gnome-help-printing-ko.md "그놈 도움말: 인쇄" printing
conv gnome-help-wireless-ko.md "그놈 도움말: 무선 네트워크" net-wireless
conv gnome-help-backup-ko.md "그놈 도움말: 백업" backup
sed -n '/^```$/,/^```$/p' "$here/data/korean-docs/SOURCE.md" | grep -v '```' > sums
(cd "$out" && sha256sum -c "$work/sums")
echo "rebuilt in $out"
