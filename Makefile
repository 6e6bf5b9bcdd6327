# Thin wrappers around tasks.py (which needs nothing but python3).
.PHONY: setup lab test bench assignments mutation
setup:
	python3 tasks.py setup
lab:
	python3 tasks.py lab
test:
	python3 tasks.py test
bench:
	python3 tasks.py bench
assignments:
	python3 tasks.py assignments
mutation:
	python3 tasks.py mutation
