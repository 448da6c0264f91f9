"""`layerbench serve`: a read-only browser of a results store, on this machine's loopback by
default. Pages are rendered on the server from the data the reports are built from; plots are
SVG images drawn by matplotlib; one small script of its own (the filters follow the URL on the
back button), and nothing from any other origin."""
