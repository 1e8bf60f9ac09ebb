"""Writes the tree of small source files that the checkpoint-at-scale
scripts measure (checkpoint_scale.sh, one_file_pair.sh): N files of about
1 KiB of text, 100 a directory, under DEST/src.

    python3 benches/scripts/source_tree.py DEST N
"""
import os
import sys

dest, n = sys.argv[1], int(sys.argv[2])
line = 'fn f() { let x = 1; /* some source text to fill the file */ }\n'
for i in range(n):
    d = os.path.join(dest, 'src', 'd%04d' % (i // 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'f%06d.rs' % i), 'w') as f:
        f.write(('// file %d\n' % i) + line * 16)
