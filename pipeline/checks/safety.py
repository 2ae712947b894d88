"""Is a text hostile? Insults, slurs, threats, self-harm and violence, scored by a maintained classifier that
ships its data: ``alt-profanity-check`` (PyPI; a linear SVM over tf-idf unigrams with sigmoid calibration,
trained on the Wikipedia toxic-comment and Davidson hate-speech corpora; MIT). No network, no download.

The phrases code owns (catalog items, taxonomy life events, the persona's name: hand-written and reviewed)
are masked before scoring, so the score is of what the model added: "keto high-fat diets" or "the snatch
and clean-and-jerk" are no insult, "you're just a bunch of kids who can't take their own lives" is. The
model's scores are computed here from its coefficients, word by word (the same numbers as its
``predict_prob``, a test holds them equal), so a check costs microseconds rather than sklearn's
milliseconds per call, and the refusal can name the word that weighed most.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from functools import cache
from importlib import metadata

from pipeline.words import without

HOSTILE = 0.5  # the classifier's calibrated probability of offensive language at which a text is refused
PACKAGE = "alt-profanity-check"


def classifier_name() -> str:
    """What the dataset card names as the safety classifier."""
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "not installed"
    return (f"{PACKAGE} {version} (linear SVM over tf-idf words, calibrated; trained on the Wikipedia toxic-comment "
            f"and Davidson hate-speech corpora), refusing at probability >= {HOSTILE}")


class _Model:
    """The classifier's numbers: per word its idf and its weight in each calibrated fold."""

    def __init__(self) -> None:
        try:
            from profanity_check import profanity_check as pc
        except ImportError as exc:  # a declared dependency: a broken install, not a user's mistake
            raise RuntimeError(f"the safety check needs {PACKAGE} (pip install {PACKAGE})") from exc
        vectorizer, model = pc.vectorizer, pc.model
        self.analyze = vectorizer.build_analyzer()
        folds = model.calibrated_classifiers_
        self.intercepts = [float(f.estimator.intercept_[0]) for f in folds]
        self.sigmoids = [(float(f.calibrators[0].a_), float(f.calibrators[0].b_)) for f in folds]
        idf = vectorizer.idf_
        coefs = [f.estimator.coef_[0] for f in folds]
        self.words = {w: (float(idf[j]), tuple(float(c[j]) for c in coefs)) for w, j in vectorizer.vocabulary_.items()}

    def score(self, text: str) -> tuple[float, str]:
        """The probability that ``text`` is offensive, and the word that weighed most toward it."""
        counts = Counter(w for w in self.analyze(text) if w in self.words)
        weights = {w: n * self.words[w][0] for w, n in counts.items()}
        norm = math.sqrt(sum(v * v for v in weights.values())) or 1.0
        probs, pulls = [], Counter()
        for k, (b, (a, c)) in enumerate(zip(self.intercepts, self.sigmoids, strict=True)):
            decision = b
            for w, v in weights.items():
                pull = v / norm * self.words[w][1][k]
                decision += pull
                pulls[w] += pull
            probs.append(1.0 / (1.0 + math.exp(a * decision + c)))
        top = max(pulls, key=pulls.get) if pulls else ""
        return sum(probs) / len(probs), top


@cache
def _model() -> _Model:
    return _Model()


def hostility(text: str, known: Iterable[str] = ()) -> tuple[float, str]:
    """``text``'s score and heaviest word, with the ``known`` phrases (code's own) masked out."""
    return _model().score(without(text, known, " it "))


def safety_problem(text: str, known: Iterable[str] = ()) -> str | None:
    """Why ``text`` may not be published (hostile, insulting, self-harm or violence), or None."""
    score, word = hostility(text, known)
    if score >= HOSTILE:
        return f"hostile or unsafe language ({score:.2f}, {word!r})"
    return None
