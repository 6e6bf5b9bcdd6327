"""The notebooks' widgets (pip extra ``widgets``: ipywidgets, matplotlib).

* ``dashboard``: the training dashboard (``make_dashboard``), presets, the runs table
* ``figures``: ``plot_histories`` (the dashboard's curves) and a figure as a widget's PNG
* ``gae_widget``: notebook 10's gamma / lambda sliders on a short PPO run
* ``clip_widget``: notebook 11's clip-family widget

Importing ``pgrl_helpers.ui`` loads nothing; ``pgrl_helpers.ui.dashboard`` loads ipywidgets and
matplotlib (``ui.figures`` matplotlib only). Where they are missing, the import fails with
``missing_extra``'s message, which names the pip extra that brings them.
"""

#: The modules of the pip extra ``widgets`` (pyproject.toml).
WIDGETS_EXTRA = ("ipywidgets", "matplotlib")


def missing_extra(error: ModuleNotFoundError) -> ModuleNotFoundError:
    """``error`` (a failed import in a ui module) as the error to raise: for a module of the
    ``widgets`` extra, one that says how to install it; any other, unchanged."""
    if (error.name or "").split(".")[0] not in WIDGETS_EXTRA:
        return error
    return ModuleNotFoundError(
        f"pgrl_helpers.ui needs {' and '.join(WIDGETS_EXTRA)} (no module named {error.name!r}): "
        "install the pip extra `widgets`: pip install 'pgrl-helpers[widgets]' (in a clone: "
        "pip install -e '.[widgets]'; `python3 tasks.py lab` installs it)",
        name=error.name,
    )
