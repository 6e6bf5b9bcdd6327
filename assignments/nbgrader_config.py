"""nbgrader's configuration for a pgrl course: copy it into the course directory.

    mkdir -p course && cp assignments/nbgrader_config.py course/

(``python3 tasks.py grade`` copies it itself.) nbgrader reads ``nbgrader_config.py`` from the
folder it runs in; the course directory is that folder (``course/`` is git-ignored, so the
students' grades in ``gradebook.db`` are never committed).
"""

import warnings

c = get_config()  # noqa: F821 (nbgrader defines get_config when it loads this file)

#: The course's name in the gradebook and in nbgrader's exchange (JupyterHub courses).
c.CourseDirectory.course_id = "pgrl"
#: Seconds a cell may run during autograde: the capstone (a9) re-runs three training runs
#: per submission, each a few seconds on a busy CPU; 300 leaves a wide margin.
c.ExecutePreprocessor.timeout = 300

# nbgrader 0.9.6 with SQLAlchemy 2.x prints "SAWarning: Object of type <SubmittedAssignment>
# not in session, add operation along 'Student.submissions' will not proceed" (and the same
# for SubmittedNotebook) once per new submission: nbgrader builds the objects before adding
# them to its session, and SQLAlchemy 2 warns about that order. The rows are written all the
# same (the scores in gradebook.db and grades.csv are right; tests/repo/test_nbgrader_flow.py
# reads them), so the warning is silenced here. Only this message is ignored.
warnings.filterwarnings("ignore", message="Object of type <", module="nbgrader")
