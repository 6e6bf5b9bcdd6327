# Thin wrappers around tasks.py (which needs nothing but python3): `make X` = `python3 tasks.py X`.
# grade takes files: python3 tasks.py grade FILE ...
.PHONY: setup lab test cpu-kernels bench assignments book timings mutation checkpoint real-model
setup:
	python3 tasks.py setup
lab:
	python3 tasks.py lab
test:
	python3 tasks.py test
cpu-kernels:
	python3 tasks.py cpu-kernels
bench:
	python3 tasks.py bench
assignments:
	python3 tasks.py assignments
book:
	python3 tasks.py book
timings:
	python3 tasks.py timings
mutation:
	python3 tasks.py mutation
checkpoint:
	python3 tasks.py checkpoint
real-model:
	python3 tasks.py real-model
