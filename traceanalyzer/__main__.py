from traceanalyzer.cli import run

run()
