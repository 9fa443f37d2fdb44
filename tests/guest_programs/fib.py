"""fib.py N: naive recursive Fibonacci, a CPU-bound Python workload that
spends its time in CPython's interpreter loop (_PyEval_EvalFrameDefault);
prints the Python version, N and fib(N)."""
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
print(sys.version.split()[0], n, fib(n))
