"""The hub's live view of its nodes and the narrow views of the hub that its rooms take
(``nodes``): below ``hub``, ``serverless`` and ``observe``, which all import it and which it
imports none of, so that those packages tie one way."""
