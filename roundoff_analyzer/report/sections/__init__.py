"""The report's sections, one module each. Each has `section(inputs: SectionInputs) -> list[str]`: its markdown
lines, or none where the sweep gives it nothing to say; `report.markdown.SECTIONS` lists them in the report's order."""
