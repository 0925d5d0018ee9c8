"""The relation algebra: every tensor of either program is described as ``term[layout]``.

A *term* is a hash-consed expression over the single-device program's inputs (so two
programs that compute the same value build the same term). A *layout* is one index
vector per dimension, selecting which elements of the term a tensor holds. Proving a
distributed output equals a single-device output is then term identity plus a check
of the index vectors.
"""
