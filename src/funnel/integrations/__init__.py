"""funnel inside the frameworks people already use. Each adapter imports its framework itself, so
`import funnel` (and this package) never needs LangChain or LlamaIndex installed.

- `funnel.integrations.langchain`: `FunnelRetriever` (a `BaseRetriever` over a funnel index) and
  `FunnelReranker` (a `BaseDocumentCompressor`: funnel's second stage over any retriever's documents);
  `pip install 'funnel[langchain]'`.
- `funnel.integrations.llama_index`: `FunnelRetriever` (a `BaseRetriever`) and `FunnelPostprocessor` (a
  `BaseNodePostprocessor`); `pip install 'funnel[llamaindex]'`.
- `funnel.integrations.mcp`: `funnel mcp`, a Model Context Protocol server; `pip install 'funnel[mcp]'`.

`funnel.integrations._core` holds what the adapters share: building a pipeline from settings names, running
the second stage over any framework's texts, and a hit's evidence as a metadata dict.
"""
