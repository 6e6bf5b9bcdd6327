# Thin wrappers around tasks.py (which needs nothing but python3).
.PHONY: setup lab test bench assignments book mutation timings
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
book:
	python3 tasks.py book
mutation:
	python3 tasks.py mutation
timings:
	python3 tasks.py timings
