"""Packaging for lengthx: every field comes from settings.ini (nbdev 2 convention)."""
from configparser import ConfigParser
import setuptools

cfg = ConfigParser(delimiters=["="])
cfg.read("settings.ini", encoding="utf-8")
c = cfg["DEFAULT"]
licenses = {"apache2": ("Apache Software License 2.0", "OSI Approved :: Apache Software License")}
lic = licenses[c["license"]]
requirements = c.get("requirements", "").split()
dev_requirements = c.get("dev_requirements", "").split()
# every other `<extra>_requirements` key of settings.ini is an extra too (e.g. docs_requirements -> .[docs])
extras = {k[: -len("_requirements")]: v.split() for k, v in c.items() if k.endswith("_requirements") and k != "dev_requirements"}
py_versions = "3.10 3.11 3.12 3.13".split()
min_python = c["min_python"]

setuptools.setup(
    name=c["lib_name"],
    version=c["version"],
    license=lic[0],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: " + c["audience"],
        "License :: " + lic[1],
        "Natural Language :: " + c["language"],
    ] + ["Programming Language :: Python :: " + v for v in py_versions[py_versions.index(min_python):]],
    url=c["git_url"],
    project_urls={"Documentation": c["doc_host"] + c["doc_baseurl"], "Source": c["git_url"],
                  "Issues": c["git_url"] + "/issues"},
    packages=setuptools.find_packages(include=["lengthx", "lengthx.*"]),
    include_package_data=True,
    install_requires=requirements,
    extras_require={"dev": dev_requirements, "bpe": ["tokenizers"], "hf": ["datasets", "tokenizers"], **extras},
    python_requires=">=" + min_python,
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    zip_safe=False,
    entry_points={"console_scripts": c["console_scripts"].split(), "nbdev": [f"{c['lib_path']}={c['lib_path']}._modidx:d"]},
    author=c["author"],
    author_email=c["author_email"],
    description=c["description"],
    keywords=c["keywords"].split(),
)
