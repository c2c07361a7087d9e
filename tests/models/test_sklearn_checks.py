"""scikit-learn's estimator checks, run against every estimator of ``daskangel.models``.

The estimators are discovered: every class in ``daskangel.models.__all__`` that
subclasses :class:`~daskangel.models.PSEstimator` and has parameters of its own
(the abstract bases ``PSEstimator`` and ``LinearModel`` have none), so a new
family is held to the contract as soon as it is exported.  ``SMALL`` gives each
one small parameters (few epochs / trees / sweeps) so a fit on the checks' tiny
data is quick; an estimator missing from it runs with its defaults.

The checks are those of ``sklearn.utils.estimator_checks.estimator_checks_generator``
(what ``check_estimator`` runs).  ``EXCLUDED`` lists the ones not run, per check
and per estimator, each with its reason; ``docs/models.md`` ("scikit-learn's
estimator checks") shows the same table, and :func:`test_docs_list_the_exclusions`
keeps the two equal.  Every fit trains on the module's 2-worker LocalCluster
(in-process workers: ``IN_PROCESS``).

Example
-------
``pytest tests/models/test_sklearn_checks.py -q --durations=0``
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from distributed import Client
from sklearn.utils.estimator_checks import estimator_checks_generator

from daskangel import models

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# the checks are about the estimator's contract, not processes (pickling is checked
# in-process by the checks themselves, faults elsewhere): the module's two workers
# run in this process, which compiles and loads each kernel once
IN_PROCESS = True


def _estimator_classes() -> list[type]:
    """Every estimator exported by ``daskangel.models`` (abstract bases left out)."""
    out = []
    for name in models.__all__:
        obj = getattr(models, name)
        if not (inspect.isclass(obj) and issubclass(obj, models.PSEstimator)):
            continue
        if obj.__init__ is object.__init__:  # no parameters: an abstract base
            continue
        out.append(obj)
    return out


# small parameters: a fit on the checks' data (tens of rows) takes well under a second;
# two tasks (one per worker) keep the per-fit scatter and job overhead low
SMALL: dict[str, dict[str, Any]] = {
    "LogisticRegression": dict(max_iter=3, n_tasks=2),
    "SoftmaxRegression": dict(max_iter=3, n_tasks=2),
    "LinearSVC": dict(max_iter=3, n_tasks=2),
    "LinearRegression": dict(max_iter=3, n_tasks=2),
    "Ridge": dict(max_iter=3, n_tasks=2),
    "HuberRegressor": dict(max_iter=3, n_tasks=2),
    "Lasso": dict(max_iter=20, n_tasks=2),
    "FMClassifier": dict(max_iter=3, n_factors=2, n_tasks=2),
    "FMRegressor": dict(max_iter=3, n_factors=2, n_tasks=2),
    "FFMClassifier": dict(max_iter=3, n_factors=2, n_tasks=2),
    "GBDTClassifier": dict(n_estimators=3, max_depth=3, min_samples_leaf=1, n_tasks=2),
    "GBDTRegressor": dict(n_estimators=5, max_depth=3, min_samples_leaf=1, n_tasks=2),
    "KMeans": dict(n_clusters=3, init="k-means++", n_init=1, max_iter=10, n_tasks=2),
    "MiniBatchKMeans": dict(n_clusters=3, init="k-means++", max_iter=3, batch_size=64, n_tasks=2),
    "LDA": dict(n_topics=3, max_iter=2, n_tasks=2),
    "MatrixFactorization": dict(n_factors=2, max_iter=2, n_tasks=2),
}

ALL = "*"
# An estimator whose input coercion, validation and prediction path is another's: the
# checks of that path (input formats, dtypes, pickling, comparisons of two inputs) run
# once, for the estimator it shares the path with.
SHARES_PATH_OF = {
    "SoftmaxRegression": "LogisticRegression",
    "LinearSVC": "LogisticRegression",
    "LinearRegression": "Ridge",
    "HuberRegressor": "Ridge",
    "Lasso": "Ridge",
    "GBDTRegressor": "GBDTClassifier",
    "FMRegressor": "FMClassifier",
    "FFMClassifier": "FMClassifier",
    "MiniBatchKMeans": "KMeans",
}
INPUT_PATH = (
    "check_estimator_sparse_matrix", "check_estimator_sparse_array", "check_estimator_sparse_tag",
    "check_estimators_dtypes", "check_dtype_object", "check_f_contiguous_array_estimator",
    "check_readonly_memmap_input", "check_estimators_pickle", "check_estimators_nan_inf",
    "check_pipeline_consistency", "check_n_features_in_after_fitting", "check_fit2d_predict1d",
    "check_fit2d_1feature", "check_fit2d_1sample", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters", "check_positive_only_tag_during_fit",
    "check_estimators_fit_returns_self", "check_estimators_partial_fit_n_features",
    "check_non_transformer_estimators_n_iter", "check_fit_score_takes_y",
    "check_classifier_data_not_an_array", "check_regressor_data_not_an_array",
    "check_transformer_data_not_an_array", "check_regressors_int",
)  # fmt: skip
LDA_FITS = (
    "check_dict_unchanged", "check_dont_overwrite_parameters", "check_dtype_object",
    "check_estimator_sparse_array", "check_estimator_sparse_matrix", "check_estimator_sparse_tag",
    "check_estimators_dtypes", "check_estimators_fit_returns_self", "check_estimators_nan_inf",
    "check_estimators_overwrite_params", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_fit2d_1feature", "check_fit2d_1sample",
    "check_fit2d_predict1d", "check_fit_check_is_fitted", "check_fit_idempotent",
    "check_fit_score_takes_y", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_n_features_in", "check_n_features_in_after_fitting",
    "check_pipeline_consistency", "check_positive_only_tag_during_fit",
    "check_readonly_memmap_input", "check_transformer_data_not_an_array",
    "check_transformer_general", "check_transformer_n_iter", "check_transformer_preserve_dtypes",
)  # fmt: skip
MF_FITS = (
    "check_complex_data", "check_dict_unchanged", "check_dont_overwrite_parameters",
    "check_dtype_object", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
    "check_estimator_sparse_tag", "check_estimators_dtypes", "check_estimators_empty_data_messages",
    "check_estimators_fit_returns_self", "check_estimators_nan_inf",
    "check_estimators_overwrite_params", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_fit2d_1feature", "check_fit2d_1sample",
    "check_fit2d_predict1d", "check_fit_check_is_fitted", "check_fit_idempotent",
    "check_fit_score_takes_y", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_n_features_in", "check_n_features_in_after_fitting",
    "check_pipeline_consistency", "check_positive_only_tag_during_fit",
    "check_readonly_memmap_input",
)  # fmt: skip
# the checks that fit a numpy matrix: FFM needs the field of every feature
FFM_FITS = (
    "check_classifier_data_not_an_array", "check_classifiers_classes", "check_classifiers_train",
    "check_decision_proba_consistency", "check_dict_unchanged", "check_dont_overwrite_parameters",
    "check_dtype_object", "check_estimator_sparse_array", "check_estimator_sparse_matrix",
    "check_estimator_sparse_tag", "check_estimators_fit_returns_self",
    "check_estimators_overwrite_params", "check_estimators_partial_fit_n_features",
    "check_f_contiguous_array_estimator", "check_fit2d_predict1d", "check_fit_check_is_fitted",
    "check_fit_idempotent", "check_fit_score_takes_y", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_n_features_in", "check_n_features_in_after_fitting",
    "check_non_transformer_estimators_n_iter", "check_positive_only_tag_during_fit",
    "check_readonly_memmap_input", "check_supervised_y_2d",
)  # fmt: skip
# the checks whose data make FM's SGD diverge: features ~ N(100, 1), make_regression's targets
FM_UNSCALED = {
    "FMClassifier": ("check_fit_check_is_fitted", "check_n_features_in"),
    "FMRegressor": (
        "check_fit_check_is_fitted", "check_fit_idempotent", "check_n_features_in",
        "check_regressor_data_not_an_array",
    ),
}  # fmt: skip

# (check, estimators it is not run for, why); the same rows are in docs/models.md
EXCLUDED: list[tuple[str, tuple[str, ...], str]] = [
    ("check_array_api_input", (ALL,), "no array API support (numpy, scipy, pandas, dask)"),
    *[
        (c, (sib,), f"same input path as {rep}, which runs it")
        for c in INPUT_PATH
        for sib, rep in SHARES_PATH_OF.items()
        # FMRegressor's regressor checks: FMClassifier does not run them
        if not (sib == "FMRegressor" and c in (*FM_UNSCALED["FMRegressor"], "check_regressors_int"))
        and not (sib == "FFMClassifier" and (c in FFM_FITS or c.startswith("check_regressor")))
    ],
    *[
        (
            c,
            ("LDA",),
            "fits non-integer floats: LDA needs integer word counts (CGS samples a "
            "topic per token); tests/models/lda checks its contract on counts",
        )
        for c in LDA_FITS
    ],
    *[
        (
            c,
            ("MatrixFactorization",),
            "fits a feature matrix: MF's input is (user, item, rating) "
            "pairs; tests/models/mf checks its contract on ratings",
        )
        for c in MF_FITS
    ],
    *[
        (
            c,
            ("FFMClassifier",),
            "fits a numpy matrix without fields: FFM needs the field of every feature (an "
            "array or a DataFrame), and the checks' matrices have arbitrary widths",
        )
        for c in FFM_FITS
    ],
    *[
        (
            c,
            (est,),
            "fits unscaled data (features ~N(100, 1); FMRegressor also make_regression's "
            "targets): FM's SGD diverges (its interaction term grows with x^2 v^2, which "
            "the linear part's step cap does not bound) and the fit raises DivergedError, "
            "the model left unfitted",
        )
        for est, checks in FM_UNSCALED.items()
        for c in checks
    ],
]


def _excluded(check: str, estimator: str) -> str | None:
    for name, who, why in EXCLUDED:
        if name == check and (ALL in who or estimator in who):
            return why
    return None


def _name(check: Callable[..., Any]) -> str:
    return getattr(check, "func", check).__name__


def _cases() -> list[Any]:
    cases = []
    for cls in _estimator_classes():
        template = cls(**SMALL.get(cls.__name__, {}))
        for est, check in estimator_checks_generator(template, legacy=True):
            if _excluded(_name(check), cls.__name__) is None:
                cases.append(pytest.param(est, check, id=f"{cls.__name__}-{_name(check)}"))
    return cases


@pytest.mark.parametrize(("estimator", "check"), _cases())
def test_sklearn_check(client: Client, estimator: Any, check: Callable[..., Any]) -> None:
    check(estimator)


def test_every_estimator_is_discovered() -> None:
    """The discovery finds every family's estimators (and gives each small parameters)."""
    names = {c.__name__ for c in _estimator_classes()}
    assert names >= {"LogisticRegression", "GBDTClassifier", "KMeans", "LDA", "MatrixFactorization"}
    assert names == set(SMALL), "give a new estimator small parameters in SMALL"
    assert "LinearModel" not in names and "PSEstimator" not in names


def _docs_rows() -> set[tuple[str, str]]:
    text = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    section = text.split("## scikit-learn's estimator checks", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`check_"):
            continue
        for check in re.findall(r"`(check_\w+)`", cells[0]):
            who = re.findall(r"`(\w+)`", cells[1]) or [ALL]
            rows |= {(check, w) for w in who}
    return rows


def test_docs_list_the_exclusions() -> None:
    """docs/models.md's table of exclusions is this module's ``EXCLUDED``."""
    ours = {(check, w) for check, who, _why in EXCLUDED for w in who}
    assert _docs_rows() == ours
