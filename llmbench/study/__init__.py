"""Studies: grids over generation and engine parameters crossed with a workload (a prompt set or an
evaluation task), measured per point, on this machine or a Ray cluster (llmbench.study.runner), and
the text metrics they report (llmbench.study.textmetrics).

>>> s = Study(model="stories260K.gguf", workload={"prompts": ["Once upon a time"] * 8},   # doctest: +SKIP
...           sampling={"temperature": [0.3, 0.7, 1.0], "top_p": [0.5, 0.9], "max_tokens": 32})
>>> run_study(s, "runs/sampling", executor="local")["points"][0]["metrics"]["distinct_2"]   # doctest: +SKIP
"""

from .grid import Study, load
from .runner import StudyFailed, run_study
from .textmetrics import distinct_n, repetition_rate, self_bleu

__all__ = ["Study", "StudyFailed", "distinct_n", "load", "repetition_rate", "run_study", "self_bleu"]
